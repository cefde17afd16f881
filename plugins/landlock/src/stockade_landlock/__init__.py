"""stockade-landlock: the ``landlock`` sandbox provider (no namespaces needed)."""
