"""The warm per-user server (``stockade serve``) and its wire protocol.

The server keeps hosts warm (plugins loaded, providers probed, the store open) and runs the
command line's hot commands for the thin client (:mod:`stockade.cli.client`) over a Unix
socket in a 0700 folder; it accepts a peer only when the kernel says it runs as the same
user and it presents the secret from a 0600 file that sandboxed commands cannot read.
"""
