"""The egress proxy of one ``network`` command: a :class:`~stockade.egress.proxy.Proxy` in a
private folder of its own, listening on a Unix socket and a loopback TCP port."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .proxy import Proxy
from .rules import parse_hosts

if TYPE_CHECKING:
    from .inject import Injection

__all__ = ["CommandProxy"]


class CommandProxy:
    """The egress proxy of one ``network`` command, in a private folder of its own."""

    def __init__(
        self,
        hosts: tuple[str, ...],
        resolve: Mapping[str, str],
        record: Callable[..., None],
        *,
        injections: Sequence[Injection] = (),
        upstream_ca: str | None = None,
        check: Callable[[], str | None] | None = None,
    ) -> None:
        rules = parse_hosts(hosts)
        self.hosts = hosts
        self.folder = tempfile.mkdtemp(prefix="stockade-egress-")
        self.ca_bundle: str | None = None
        try:
            inject = None
            if injections:
                from .inject import Injector

                inject = Injector(injections, self.folder, upstream_ca)
                self.ca_bundle = inject.authority.bundle
            self.proxy = Proxy(
                rules, resolve=resolve, on_connection=record, inject=inject, check=check
            )
            self.socket = os.path.join(self.folder, "proxy.sock")
            self.proxy.serve_unix(self.socket)
            self.port = self.proxy.serve_tcp()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the proxy (open tunnels end) and remove its folder."""
        from ..trees import remove_tree  # without recursion, as every tree removal

        if hasattr(self, "proxy"):
            self.proxy.close()
        remove_tree(self.folder)
