"""stockade-local: the executor that runs launch plans as local process trees."""
