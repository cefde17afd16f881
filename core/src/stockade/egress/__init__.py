"""The egress proxy a ``network`` command reaches the network through, its host rules and its
strict request and TLS parsers.
"""
