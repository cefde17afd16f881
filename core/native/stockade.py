#!python
"""``stockade`` where no C compiler was found when this package was built: the Python
client itself (``stockade-py``), under the name the native client takes otherwise
(``core/hatch_build.py``). ``stockade doctor`` says which one is installed."""

from stockade.cli import entry

entry()
