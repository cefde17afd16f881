"""``wire.plain`` (what every recorded event's body is built from) gives the JSON
``attrs.asdict`` gave with the serializer it replaced (the text that is hashed and signed),
for every kind of event a host records and for every shape of value the types hold."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import attrs
import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import StockadeError
from stockade.record.chain import canonical
from stockade.request.spec import ExecRequest
from stockade.request.wire import plain
from stockade.testing import AllowAll, EventLog


def _serialize(_inst: object, _field: object, value: object) -> object:
    if isinstance(value, MappingProxyType):
        return dict(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple):
        return list(value)
    return value


def _reference(obj: object) -> str:
    found = attrs.asdict(obj, recurse=True, value_serializer=_serialize)  # type: ignore[arg-type]
    return canonical(found)


@attrs.frozen
class Inner:
    raw: bytes
    names: tuple[str, ...]


@attrs.frozen
class Outer:
    inner: Inner
    many: tuple[Inner, ...]
    table: MappingProxyType[str, Inner]
    nested: dict[str, list[tuple[int, str]]]
    nothing: None = None


def test_plain_gives_what_asdict_gave_for_every_shape() -> None:
    inner = Inner(b"caf\xc3\xa9 \xff", ("a", "b"))
    value = Outer(
        inner,
        (inner, inner),
        MappingProxyType({"k": inner}),
        {"n": [(1, "x"), (2, "y")]},
    )
    assert canonical(plain(value)) == _reference(value)
    assert plain(value)["inner"]["raw"] == "café \ufffd"
    assert plain(value)["nested"] == {"n": [[1, "x"], [2, "y"]]}  # lists all the way down


def test_plain_gives_what_asdict_gave_for_every_event_a_host_records(
    make_host, tmp_path: Path
) -> None:
    log, ws = EventLog(), tmp_path / "ws"
    ws.mkdir()
    config = Config(store=StoreConfig(path=str(tmp_path / "state" / "store.db")))
    host = make_host(plugins=[log, AllowAll()], config=config)
    full, here = "danger-full-access", str(ws)
    host.run(ExecRequest(["echo", "out"], here, mode=full, env={"A": "b"}))
    host.run(ExecRequest(["sh", "-c", "cat; exit 3"], here, mode=full, stdin=b"in\xff"))
    host.run(ExecRequest(["true"], here, mode=full, grant_writable=(here,), preapproved=True))
    with pytest.raises(StockadeError):  # refused, recorded: an action and an error
        host.run(ExecRequest(["true"], here, mode=full, credentials={"K": "vault:none"}))
    kinds = {event.kind for event in log.events}
    assert {"action", "permission", "result", "taint", "grant", "error"} <= kinds, kinds
    for event in log.events:
        assert canonical(plain(event)) == _reference(event), event.kind
