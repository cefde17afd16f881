"""Doing: carry out an admitted step (confine it, execute it under observation: quota, changes,
the check after the run) and give back its result. Never imports :mod:`stockade.policy`.
"""
