"""Deciding: resolve a request into a spec, classify it, enforce its profile, decide (allow,
ask a person, deny), hold a step for a person. Never imports :mod:`stockade.run`.
"""
