"""The built-in credential broker: a secret by its handle, from the host's environment or a file.

A request names a secret by *handle* (``credentials={"GITHUB_TOKEN": "github"}``); at spawn
time the host asks the brokers for its value and puts it into the child's environment only.
This broker looks in two places, in order:

1. the host's own environment (the one the host was started with, never the request's):
   ``[credentials] env_prefix`` + the handle upper-cased, ``-`` and ``.`` as ``_``
   (``github`` -> ``STOCKADE_SECRET_GITHUB``); an empty value counts as unset. Such names
   never reach a child by themselves: the child's environment is an allowlist, and a name
   with the default prefix looks like a secret, which even ``env.allow`` cannot pass.
   Through the warm server, the host's environment is the client's less the variables it
   withholds (names that look like secrets, unless they begin with ``STOCKADE_``): such a
   variable is asked of the client by name, for this call only (:mod:`stockade.caller`);
2. ``[credentials] file``: a TOML file of ``handle = "secret"`` lines that only its owner,
   the current user, may read or write. It is read on the first handle that needs it (not
   when the host starts) and read again when it changes.

It runs last (``trylast``), so an installed broker (a keyring, a vault) answers first. A
handle it does not know is ``None``: the host then refuses the command with
``CredentialUnavailable``.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Mapping

from .. import caller, hookimpl
from ..config.schema import Config, CredentialsConfig
from ..errors import CredentialUnavailable
from ..request.spec import ExecSpec

NAME = "builtin-credentials"

HANDLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""What a handle looks like (matched whole): letters, digits, ``_ . -``; not ``_.-`` first."""

_FileKey = tuple[int, int, int, int]


def env_name(prefix: str, handle: str) -> str:
    """The host environment variable that holds ``handle``'s secret."""
    return prefix + handle.upper().replace("-", "_").replace(".", "_")


def check_handle(handle: str) -> None:
    """Raise :class:`CredentialUnavailable` unless ``handle`` is a well-formed handle.

    Not a :class:`UsageError`: another broker may take handles of its own syntax
    (``vault:kv/github``); this one is asked only when none of them resolved it.
    """
    if not HANDLE.fullmatch(handle):
        raise CredentialUnavailable(
            f"no credential broker resolved {handle!r}, and it is not a handle the built-in "
            "broker accepts",
            hint="a built-in handle is letters, digits, '_', '.' and '-', starting with a "
            "letter or a digit (github, aws.prod, npm-token); any other syntax needs the "
            "broker plugin that knows it",
            details={"handle": handle},
        )


class CredentialBroker:
    """Resolves handles from the host environment under a prefix, then from a secrets file.

    Args:
        config: the ``[credentials]`` table.
        environ: the host's ambient environment.
        named: the config as a hint names it (:attr:`Config.named`).
    """

    def __init__(
        self, config: CredentialsConfig, environ: Mapping[str, str], named: str = "the config"
    ) -> None:
        self.named = named
        self.prefix = config.env_prefix
        self.file = os.path.expanduser(config.file) if config.file else None
        self.environ = environ
        self._lock = threading.Lock()
        self._key: _FileKey | None = None
        self._secrets: dict[str, str] = {}

    @hookimpl(trylast=True)
    def stockade_resolve_credential(self, handle: str, spec: ExecSpec) -> str | None:
        """The secret behind ``handle``, or ``None`` when neither source has it.

        Raises:
            CredentialUnavailable: ``handle`` is malformed; or the secrets file is missing,
                not private to its owner, not TOML, or holds something other than
                ``handle = "secret"``.
        """
        check_handle(handle)
        if self.prefix:
            variable = env_name(self.prefix, handle)
            value = self.environ.get(variable)
            if value is None:
                value = _from_client(variable)
            if value:
                return value
        if self.file is None:
            return None
        return self.secrets().get(handle)

    def secrets(self) -> Mapping[str, str]:
        """The secrets file's content, read again only when the file changed.

        Raises:
            CredentialUnavailable: see :meth:`stockade_resolve_credential`.
        """
        path = self.file
        if path is None:
            return {}
        try:
            # O_NONBLOCK: a FIFO planted at the path must not hang the host; no effect on files.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise _unavailable(
                f"the secrets file {path} (credentials.file) does not exist",
                hint=f"create it with `install -m 600 /dev/null {path}` and add "
                f'handle = "secret" lines, or fix credentials.file in {self.named}',
                path=path,
            ) from None
        except OSError as error:
            raise _unavailable(
                f"cannot open the secrets file {path}: {error.strerror}", path=path
            ) from None
        with os.fdopen(fd, "rb") as stream:
            # Judged on what was opened (fstat), not on the path, which could change since.
            info = os.fstat(stream.fileno())
            _check_private(path, info)
            key = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
            with self._lock:
                if key != self._key:
                    self._secrets = _parse(path, stream.read())
                    self._key = key
                return self._secrets


def _check_private(path: str, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise _unavailable(f"the secrets file {path} is not a regular file", path=path)
    uid = os.getuid()
    if info.st_uid != uid:
        raise _unavailable(
            f"the secrets file {path} is owned by uid {info.st_uid}, not by the current "
            f"user (uid {uid}), so someone else can change it",
            hint=f"`chown {uid} {path}` and `chmod 600 {path}`, or point credentials.file "
            "at a file of your own",
            path=path,
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise _unavailable(
            f"the secrets file {path} has mode {mode:04o}: its group or others may read "
            "or write it, so it is not used",
            hint=f"`chmod 600 {path}` (and change every secret in it, since others could read it)",
            path=path,
        )


def _parse(path: str, raw: bytes) -> dict[str, str]:
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise _unavailable(
            f"the secrets file {path} is not UTF-8 text (byte {error.start})", path=path
        ) from None
    except tomllib.TOMLDecodeError as error:
        # The parser's message gives a line and column, never the text around them.
        raise _unavailable(
            f"the secrets file {path} is not valid TOML: {error}",
            hint='write one handle = "secret" line per secret',
            path=path,
        ) from None
    secrets = {}
    for handle, value in data.items():
        if not HANDLE.fullmatch(handle):
            raise _unavailable(
                f"the secrets file {path} has the key {handle!r}, which is not a handle",
                hint="a handle is letters, digits, '_', '.' and '-', starting with a letter "
                "or a digit",
                path=path,
            )
        if not isinstance(value, str) or not value:
            what = "an empty string" if value == "" else f"a TOML {_toml_type(value)}"
            raise _unavailable(
                f"the value of {handle!r} in the secrets file {path} is {what}, not a "
                "secret string",
                hint=f'write {handle} = "the secret" (a quoted, non-empty string)',
                path=path,
            )
        secrets[handle] = value
    return secrets


def where_to_put(config: Config, handle: str) -> str:
    """Where the built-in broker looks for ``handle``, as a hint: the variable to set and the
    secrets file to fill, with the config's path."""
    creds = config.credentials
    places = []
    if creds.env_prefix:
        variable = env_name(creds.env_prefix, handle)
        places.append(f"set {variable} in the environment stockade runs with")
    if creds.file:
        places.append(f'add {handle} = "..." to the secrets file {creds.file}')
    else:
        places.append(f"name a secrets file as credentials.file in {config.named}")
    return ", or ".join(places) + "; or install a credential broker plugin that knows it"


def _toml_type(value: object) -> str:
    names = {dict: "table", list: "array", bool: "boolean", int: "integer", float: "float"}
    return names.get(type(value), "date or time")


def _from_client(variable: str) -> str | None:
    """A variable the server's client withheld from the call, asked of it now; ``None`` in a
    process of its own (its environment is whole)."""
    who = caller.current()
    if who is None or who.getenv is None:
        return None
    return who.getenv(variable)


def _unavailable(message: str, *, path: str, hint: str | None = None) -> CredentialUnavailable:
    return CredentialUnavailable(
        message,
        hint=hint or "fix the secrets file named by credentials.file",
        details={"file": path},
    )


def make_plugin(config: Config, environ: Mapping[str, str]) -> CredentialBroker:
    """The broker for one host."""
    return CredentialBroker(config.credentials, environ, config.named)
