"""The conformance kit: Stockade's attack suite, run against any sandbox provider by name.

Run it with ``python -m stockade.conformance --sandbox NAME [pytest arguments]`` (install
``stockade[conformance]`` for pytest). Every attack plants a canary, tries to reach it from
inside the sandbox, and has a control showing it could see a breach. What each attack expects
comes from the provider's declaration (``PROMISES`` and ``GAPS``, see
:mod:`stockade.confine.promises`), never from its name. The run ends with a table, promise by
promise, to paste into the provider's README. ``docs/providers.md`` is the contract it checks.

Parts: :mod:`~stockade.conformance.ground` (the box of canaries, the provider lookup),
:mod:`~stockade.conformance.plugin` (the pytest plugin), :mod:`~stockade.conformance.table`
(the verdict), ``stockade.conformance.suite`` (the attacks).
"""
