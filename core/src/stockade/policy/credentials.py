"""Credential handles resolved to values by the brokers, for one command, on the deciding side.

The values go beside the admitted step (never inside it), and are scrubbed from what comes
back; a command whose argv carries one is refused before anything about it is recorded. A
handle its profile binds (:func:`bound`) never reaches the child: the child gets a
placeholder, and the egress proxy puts the value into requests to the bound host only. Any
other handle's value goes into the child's environment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CredentialUnavailable
from ..record.broker import where_to_put
from ..request.step import BoundCredential

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..config.schema import Config
    from ..plugin.manager import Hooks
    from ..record.recording import Recording
    from ..request.spec import ExecSpec, Profile


def used(spec: ExecSpec) -> Mapping[str, str]:
    """The credentials a step asked for: variable -> handle (never a value). The breaker
    counts each as private data the run holds (:mod:`stockade.policy.breaker`)."""
    return spec.credentials


def credentials(hooks: Hooks, spec: ExecSpec, config: Config | None = None) -> dict[str, str]:
    """Each requested handle resolved to its value by a broker.

    Raises:
        CredentialUnavailable: no broker resolved a handle (with ``config``, its hint names
            the variable and the secrets file the built-in broker reads).
    """
    values = {}
    for variable, handle in spec.credentials.items():
        value = hooks.resolve_credential(handle, spec)
        if value is None:
            hint = "install or configure a credential broker plugin that knows it"
            if config is not None:
                hint = where_to_put(config, handle)
            raise CredentialUnavailable(
                f"no credential broker resolved {handle!r} (for {variable})",
                hint=hint,
                details={"handle": handle, "variable": variable},
            )
        values[variable] = value
    return values


def secrets(hooks: Hooks, spec: ExecSpec, config: Config | None = None) -> dict[str, str]:
    """:func:`credentials`, refusing a command whose argv carries one of the values.

    Raises:
        CredentialUnavailable: no broker resolved a handle.
        UsageError: an argument holds a secret (or an encoding of it).
    """
    if not spec.credentials:
        return {}
    values = credentials(hooks, spec, config)
    from ..record.redact import refuse_in_argv

    refuse_in_argv(spec.argv, values.values())
    return values


def bound(profile: Profile, spec: ExecSpec) -> tuple[BoundCredential, ...]:
    """The command's credentials that its profile binds to a host: injected by the proxy."""
    return tuple(
        BoundCredential(variable, handle, profile.credentials[handle])
        for variable, handle in sorted(spec.credentials.items())
        if handle in profile.credentials
    )


def recorded(
    hooks: Hooks, spec: ExecSpec, recording: Recording, config: Config | None = None
) -> dict[str, str]:
    """:func:`secrets`, resolved before anything is recorded, so that an argv carrying one is
    refused before it could be written down; a handle no broker knows is recorded.

    Raises:
        CredentialUnavailable: no broker resolved a handle (recorded).
        UsageError: an argument holds a secret (nothing recorded).
    """
    try:
        return secrets(hooks, spec, config)
    except CredentialUnavailable as error:
        # No value was found, so none can be in argv: the refusal is recorded.
        recording.action(spec)
        recording.error(spec, error)
        raise
