"""Stockade's MCP server."""
