"""The run page: a loopback-only web view of runs (``stockade ui``)."""
