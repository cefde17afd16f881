"""Plugins: the hook specifications, the plugin manager and its typed facade, entry points,
and the checks of plugin settings.
"""
