"""The attacks, one module per concern; each case is marked with the promise it attacks."""
