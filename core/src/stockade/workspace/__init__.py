"""Workspaces: agents' folders, their locks, run homes and caches, and the file tools."""
