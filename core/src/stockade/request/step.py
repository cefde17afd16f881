"""The one value between deciding and doing: a step every deciding stage let through.

Deciding (:mod:`stockade.policy`: resolve, classify, enforce, decide, hold) happens where the
policy and the record live. Doing (:mod:`stockade.run`: confine, execute, observe) happens
wherever the command runs: in the host's own process, in a warm server, on a remote worker.
Between them travels an :class:`AdmittedStep`, fully resolved and serializable through the
one converter (:func:`stockade.request.wire.step_to_json`), and back comes a
:class:`Carried`: the result and what the check after the run did.

Credential *handles* travel in ``spec.credentials``; their values never travel in the step:
a doer is handed them beside it, and they are redacted from what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen

from .checks import _frozen_map, _strings
from .result import Guarded, RunResult
from .spec import CredentialBinding, ExecSpec, Profile
from .verdict import Classification, Decision

STEP_VERSION = 1
"""The version of the step's wire form; a doer refuses a step of a version it does not know."""


@frozen
class Agent:
    """The agent profile a request runs under, resolved once for the whole path.

    Attributes:
        profile: the profile (``[agents.NAME]``, or the person's own ``default``).
        own_workspace: whether it has a workspace of its own: then the workspace is held
            while a command runs there, the run gets a home, and its changes are watched.
    """

    profile: Profile
    own_workspace: bool


@frozen
class BoundCredential:
    """A credential of one command that the egress proxy injects (its profile binds it).

    Attributes:
        variable: the command's variable, which holds a placeholder.
        handle: the credential's handle.
        binding: where the proxy puts the value.
    """

    variable: str
    handle: str
    binding: CredentialBinding


@frozen
class EgressRule:
    """What a ``network`` step's egress proxy lets through, as decided.

    Attributes:
        hosts: the profile's ``hosts`` rules (``name``, ``*.suffix``, ``name:port``).
        resolve: names pinned to addresses (the config's ``network.resolve``).
        credentials: the command's credentials the proxy injects, by their bindings.
        upstream_ca: a CA file the proxy trusts, besides the system's, for its own TLS
            upstream of an injected host (``network.upstream_ca``: for tests).
        over_breaker: a person approved the step after its run held private data and
            somebody else's words (the breaker's ``ask``): the proxy's breaker check lets its
            connections on. Otherwise a connection made while the run holds both is refused.
    """

    hosts: tuple[str, ...] = field(converter=_strings)
    resolve: Mapping[str, str] = field(kw_only=True, factory=dict, converter=_frozen_map)
    credentials: tuple[BoundCredential, ...] = field(kw_only=True, default=())
    upstream_ca: str | None = field(kw_only=True, default=None)
    over_breaker: bool = field(kw_only=True, default=False)


@frozen
class AdmittedStep:
    """A command every deciding stage let through: what a doer needs to carry it out.

    Attributes:
        spec: the resolved command, its class enforced and its roots checked; its ``env``
            holds no credential value, and its ``egress`` is ``None`` (the doer starts the
            proxy and fills it in).
        classification: what it may affect.
        decision: why it may run (the policy, a person, an approval in advance, or the
            approval of a held step).
        agent: the profile it runs under, resolved once.
        egress: for a ``network`` step whose profile names hosts, what its proxy allows;
            ``None``: no network at all.
        version: the wire form's version (:data:`STEP_VERSION`).
    """

    spec: ExecSpec
    classification: Classification
    decision: Decision
    agent: Agent
    egress: EgressRule | None = field(kw_only=True, default=None)
    version: int = field(kw_only=True, default=STEP_VERSION)


@frozen
class Carried:
    """What carrying out a step gave back.

    Attributes:
        result: the command's result, every credential value scrubbed from its output.
        guarded: what the check after the run quarantined and restored (``None``: no check
            ran, as for a ``read-only`` or ``danger-full-access`` command).
        version: the wire form's version (:data:`STEP_VERSION`).
    """

    result: RunResult
    guarded: Guarded | None = None
    version: int = field(kw_only=True, default=STEP_VERSION)
