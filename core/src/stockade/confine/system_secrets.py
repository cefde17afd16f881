"""System secrets: what every confined mode masks, whoever runs the command.

Password hashes, host keys, sudoers and the like (:data:`SYSTEM_SECRETS`, extended by the
``system_secrets`` configuration key), expanded at confine time. Each sandbox provider
masks them its own way (bubblewrap with masks, Landlock with carve-outs); the list and its
expansion live here so that both read one list and a fix reaches both.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable

from .. import resolved
from ..errors import SandboxUnavailable
from . import protected
from .protected import inside

__all__ = ["HOMES_AMONG_SECRETS", "SYSTEM_SECRETS", "refuse_bound_secrets", "system_secrets"]

# System secrets: masked (unreadable) in every confined mode, whoever runs the command.
# Paths or globs, expanded at confine time; the ``system_secrets`` config key adds more.
SYSTEM_SECRETS = (
    "/etc/shadow*",  # password hashes, and their backups (shadow-, shadow~, ...)
    "/etc/gshadow*",  # group password hashes, and their backups
    "/etc/sudoers*",  # who may become root: sudoers, sudoers.d, editors' leftovers
    "/etc/ssh/*key",  # SSH host private keys (ssh_host_ed25519_key, ...); never the .pub
    "/etc/krb5.keytab",  # Kerberos service keys of this host
    "/etc/krb5kdc",  # a Kerberos KDC's stash of its master key
    "/var/lib/krb5kdc",  # (where Debian keeps the KDC's database and stash)
    "/etc/security/opasswd*",  # old password hashes kept by pam_pwhistory
    "/etc/ssl/private",  # TLS private keys (Debian, Ubuntu)
    "/etc/pki/tls/private",  # TLS private keys (Fedora, RHEL)
    "/etc/letsencrypt",  # certbot's account and certificate private keys
    "/etc/wireguard",  # WireGuard private keys
    "/etc/NetworkManager/system-connections",  # Wi-Fi and VPN passwords
    "/etc/ipsec.secrets",  # IPsec pre-shared and private keys
    "/etc/ppp/*-secrets",  # PPP CHAP and PAP passwords
    "/etc/mysql/debian.cnf",  # the MySQL maintenance account's password
    "/etc/sssd",  # SSSD's configuration: directory bind passwords
    "/var/lib/sss/db",  # SSSD's cache of domain users' password hashes
    "/var/lib/sss/secrets",  # SSSD's secrets store
    "/var/lib/samba/private",  # Samba's password database and machine secret
    "/etc/credstore*",  # systemd credentials (credstore, credstore.encrypted)
    "/var/lib/systemd/credential.secret",  # the key of systemd's encrypted credentials
    "/var/backups/*shadow*",  # Debian's daily copies of shadow and gshadow
    "/root",  # root's home, when it is not the home of the command or of the user running
)
"""Paths or globs of the system secrets, masked in every confined mode whoever runs the
command; expanded at confine time by :func:`system_secrets`."""
HOMES_AMONG_SECRETS = frozenset({"/root"})
"""System secrets left out when a home in use is, or lies in, one."""


def system_secrets(homes: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """The system secrets on this machine now, resolved, each once: ready to mask.

    :data:`SYSTEM_SECRETS` and ``extra`` (the ``system_secrets`` config key), with their
    globs expanded now, at confine time, so a host key made after start-up is masked too.
    ``/root`` is left out when it is, or holds, one of ``homes`` (root runs Stockade, or a
    command's ``HOME`` lies there): its credential stores are masked instead, as for every
    home. No other entry is ever left out, whatever ``HOME`` a command names.

    Args:
        homes: the home directories in use, resolved (see :func:`homes`).
        extra: more paths or globs, absolute.
    """
    found: list[str] = []
    for pattern in (*SYSTEM_SECRETS, *extra):
        for path in _expand(pattern):
            if not os.path.lexists(path):
                continue
            real = protected.real(path)  # a symlinked secret is masked where it really is
            in_use = real in HOMES_AMONG_SECRETS and any(inside(h, [real]) for h in homes)
            if real != "/" and real not in found and not in_use:
                found.append(real)
    return found


def refuse_bound_secrets(bound: Iterable[str], secrets: Iterable[str]) -> None:
    """Refuse a folder the sandbox would show (a workspace, a writable root, a cache) that
    is, or lies in, a system secret: it would show what the mask hides.

    Raises:
        SandboxUnavailable: naming the folder and the secret.
    """
    found = list(secrets)
    for folder in bound:
        real = resolved.realpath(folder)
        for secret in found:
            if inside(real, [secret]):
                raise SandboxUnavailable(
                    f"{real} lies in {secret}, a system secret that every sandbox masks",
                    hint="work in a folder outside the system secrets (see system_secrets in "
                    "the configuration reference)",
                    details={"path": real, "secret": secret},
                )


def _expand(pattern: str) -> list[str]:
    """The paths ``pattern`` names now; a glob in the last part only reads its folder
    again when the folder has changed (its mtime)."""
    if not glob.has_magic(pattern):
        return [pattern]
    folder, name = os.path.split(pattern)
    if glob.has_magic(folder):
        return sorted(glob.glob(pattern, include_hidden=True))
    try:
        stamp = os.stat(folder).st_mtime_ns
    except OSError:
        return []
    cached = _globbed.get(pattern)
    if cached is None or cached[0] != stamp:
        try:
            names = fnmatch.filter(os.listdir(folder), name)
        except OSError:
            return []
        cached = (stamp, tuple(os.path.join(folder, n) for n in sorted(names)))
        _globbed[pattern] = cached
    return list(cached[1])


_globbed: dict[str, tuple[int, tuple[str, ...]]] = {}  # pattern -> (its folder's mtime, paths)
