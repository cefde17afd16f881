"""The configuration: its schema (:mod:`.schema`) and reading it from a file (:mod:`.load`)."""
