"""Stockade's bubblewrap sandbox provider."""
