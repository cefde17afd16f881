"""Confinement: the sandbox provider contract and choice, protected names and paths, writable
roots, system secrets, what a sandbox hides, seccomp and kernel facts.
"""
