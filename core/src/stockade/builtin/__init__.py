"""The built-in defaults, registered as plugins so any installed plugin can take over."""
