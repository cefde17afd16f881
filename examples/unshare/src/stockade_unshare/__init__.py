"""stockade-unshare: an example sandbox provider for Stockade, built on util-linux unshare."""
