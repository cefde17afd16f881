"""The record: events, the SQLite store, the hash chain and its signatures, blobs, redaction,
verification, the built-in recorder and credential broker.
"""
