"""Helpers shared by the executor tests: process inspection and subprocess scripts."""
