"""What every confining backend protects, found the same way: the shared protected paths.

Inside a writable root, some paths must stay read-only whatever the mode grants: every
``.git`` (so a command cannot plant a hook that runs later, outside any sandbox), the
directory a ``.git`` file's ``gitdir:`` names, and agent or editor configuration that a
person's tools run or trust. Under every home, credential stores must be unreadable. Host
sockets the environment names must be unreachable. System secrets (password hashes, host
keys, sudoers) must be unreadable in every confined mode, as root too.

This module finds them; each sandbox provider enforces them its own way (bubblewrap with
read-only binds and masks, Landlock with rules that leave them out). It is in the core so
that both read one list and one walk, and a fix reaches both.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import pwd
from collections.abc import Iterable, Mapping

from .errors import SandboxUnavailable

# Credential stores under a home directory: masked (unreadable) in every mode.
CREDENTIAL_STORES = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
    ".netrc",
    ".config/gh",
    ".config/gcloud",
    ".azure",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
)
# Agent and editor configuration: read-only wherever it sits inside a writable root.
AGENT_CONFIG = frozenset(
    {".vscode", ".idea", ".mcp.json", ".claude", ".codex", ".agents", ".envrc"}
)
DEFAULT_SCAN_LIMIT = 20_000

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
HOMES_AMONG_SECRETS = frozenset({"/root"})  # left out when a home in use is, or lies in, one


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
            real = os.path.realpath(path)  # a symlinked secret is masked where it really is
            in_use = real in HOMES_AMONG_SECRETS and any(inside(h, [real]) for h in homes)
            if real != "/" and real not in found and not in_use:
                found.append(real)
    return found


def homes(env: Mapping[str, str], host_env: Mapping[str, str]) -> list[str]:
    """Every home directory whose credential stores must be masked."""
    found = [env.get("HOME", ""), host_env.get("HOME", "")]
    with contextlib.suppress(KeyError):
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    out: list[str] = []
    for home in found:
        if home and os.path.isabs(home):
            real = os.path.realpath(home)
            if real != "/" and real not in out:
                out.append(real)
    return out


def refuse_bound_secrets(bound: Iterable[str], secrets: Iterable[str]) -> None:
    """Refuse a folder the sandbox would show (a workspace, a writable root, a cache) that
    is, or lies in, a system secret: it would show what the mask hides.

    Raises:
        SandboxUnavailable: naming the folder and the secret.
    """
    found = list(secrets)
    for folder in bound:
        real = os.path.realpath(folder)
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


def socket_paths(host_env: Mapping[str, str]) -> list[str]:
    """Host sockets the environment names (agent, session bus, docker), to mask by path."""
    paths = [host_env.get("SSH_AUTH_SOCK", "")]
    for part in host_env.get("DBUS_SESSION_BUS_ADDRESS", "").split(";"):
        for item in part.partition(":")[2].split(","):
            key, _, value = item.partition("=")
            if key == "path":
                paths.append(value)
    docker = host_env.get("DOCKER_HOST", "")
    if docker.startswith("unix://"):
        paths.append(docker[len("unix://") :])
    return [p for p in paths if p and os.path.isabs(p)]


def writable_roots(roots: Iterable[str]) -> list[str]:
    """``roots`` resolved, existing directories only, each once; ``/`` is refused.

    Raises:
        SandboxUnavailable: a root is ``/``, which would make every file writable.
    """
    writable: list[str] = []
    for root in roots:
        real = os.path.realpath(root)
        if real == "/":
            raise SandboxUnavailable(
                "refusing / as a writable root: it would make every file writable",
                hint="name a project directory as the workspace",
            )
        if os.path.isdir(real) and real not in writable:
            writable.append(real)
    return writable


def inside(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies beneath one."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def scan(roots: list[str], limit: int, *, setting: str) -> tuple[list[str], int]:
    """Protected paths under ``roots``: every ``.git``, ``gitdir:`` targets, agent config.

    Symlinked directories are not followed; a protected name that is itself a symlink is
    refused, since what it points at cannot be told apart from a planted redirection.

    Args:
        roots: the writable roots, resolved.
        limit: the most directories to visit.
        setting: the configuration key that sets ``limit``, named in the refusal.

    Returns:
        The protected paths and the number of directories visited.

    Raises:
        SandboxUnavailable: a protected path is a symlink or reached through one, the
            limit was hit, or a directory that a command could have hidden is unlisted.
    """
    protected: list[str] = []
    stack = list(roots)
    scanned = 0
    while stack:
        directory = stack.pop()
        scanned += 1
        if scanned > limit:
            raise SandboxUnavailable(
                f"more than {limit} directories under {', '.join(roots)} to scan for "
                "protected paths (.git, agent config)",
                hint=f"raise {setting}, or use a smaller workspace",
                details={"scan_limit": limit},
            )
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            _unlisted(directory, error)
            continue
        for entry in entries:
            name = entry.name
            if name == ".git" or name in AGENT_CONFIG:
                if entry.is_symlink():
                    raise SandboxUnavailable(
                        f"protected path {entry.path} is a symlink; refusing to guess what "
                        "it protects",
                        hint="replace the symlink with the directory or file itself",
                        details={"path": entry.path},
                    )
                protected.append(entry.path)
                if name == ".git" and entry.is_file(follow_symlinks=False):
                    target = _gitdir(entry.path)
                    if target is not None and inside(target, roots):
                        protected.append(target)
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return protected, scanned


def _unlisted(directory: str, error: OSError) -> None:
    """Refuse a directory the scan cannot list, unless no command here could write in it.

    A command may take the read permission off a directory it owns; the next run would not
    see the ``.git`` inside, and the command could put the permission back and write there.
    """
    try:
        owner = os.stat(directory).st_uid
    except OSError:
        return  # gone since it was listed: nothing there to protect
    if owner == os.getuid() or os.access(directory, os.W_OK):
        raise SandboxUnavailable(
            f"cannot look for protected paths in {directory}: {error.strerror}",
            hint=f"give it back its read permission (chmod u+rx {directory})",
            details={"path": directory},
        )


def _gitdir(path: str) -> str | None:
    """The directory a ``.git`` file points at; refused when the way there has a symlink."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
    except OSError as error:
        raise SandboxUnavailable(
            f"cannot read {path} to protect the repository it names: {error.strerror}",
            hint=f"give it back its read permission (chmod u+r {path})",
            details={"path": path},
        ) from None
    if not first.startswith("gitdir:"):
        return None
    target = os.path.normpath(os.path.join(os.path.dirname(path), first[7:].strip()))
    if os.path.realpath(target) != target:
        raise SandboxUnavailable(
            f"the gitdir of {path} ({target}) is reached through a symlink; refusing to "
            "guess which repository to protect",
            hint="point the gitdir: line at the real directory",
            details={"path": path, "gitdir": target},
        )
    return target if os.path.isdir(target) else None
