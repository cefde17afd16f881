"""What a held card says about the network: what letting the step go ahead gives it.

A held step's spec never carries its egress proxy (the host starts one only when the step
runs), so the card cannot read the answer off the spec. It says what the host will do:
a ``network`` command reaches its profile's hosts through the proxy, or nothing at all
when the profile names none; any other command reaches nothing; ``danger-full-access``
is not confined.
"""

from __future__ import annotations

from attrs import frozen

from stockade.config.schema import Config
from stockade.errors import StockadeError
from stockade.record.store import HeldStep


@frozen
class Network:
    """The card's Network line.

    Attributes:
        text: what the command may reach if it goes ahead, in words.
        warn: whether a person should stop at it (no network for a network command, or
            no confinement at all).
    """

    text: str
    warn: bool = False


def network_of(config: Config, held: HeldStep) -> Network:
    """What letting ``held`` go ahead gives it to reach, by the page's config."""
    spec = held.spec
    if spec.mode == "danger-full-access":
        return Network("the host's own: mode danger-full-access is not confined", warn=True)
    if spec.egress is not None:
        return Network(f"only {', '.join(spec.egress.hosts)}, through the egress proxy")
    if held.classification.kind != "network":
        return Network("none")
    try:
        hosts = config.profile(spec.profile).hosts
    except StockadeError:
        hosts = ()
    if hosts:
        return Network(f"only {', '.join(hosts)}, through the egress proxy")
    return Network(
        f"none: letting it go ahead runs it with no network, because profile {spec.profile}"
        f" names no hosts (add hosts = [...] to [agents.{spec.profile}] in {config.named},"
        " then ask again)",
        warn=True,
    )
