"""The one converter: every JSON and config conversion in Stockade goes through here.

Extra keys are refused, bytes travel as UTF-8 text, events are told apart by their ``kind``
field, and config errors come out as readable paths (``unknown key 'timout' @ $``).

cattrs is imported on first use, not with this module: :func:`plain`, which the recorder
calls for every event, needs only attrs, and a CLI run that records pays nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ..errors import UsageError

if TYPE_CHECKING:
    import cattrs

    from .step import AdmittedStep, Carried

T = TypeVar("T")
S = TypeVar("S", "AdmittedStep", "Carried")


def plain(obj: object) -> Any:  # noqa: ANN401 - JSON-ready data of any shape
    """JSON-ready data for an attrs value (dicts, lists, strings, numbers), without cattrs.

    The same shape :func:`unstructure` gives: tuples become lists, mappings dicts, bytes
    UTF-8 text. The same data as ``attrs.asdict(obj, value_serializer=...)`` gave, built
    from each class's field names, found once (the recorder calls it for every event).
    """
    return _plain(obj)


_ATOMS = frozenset({type(None), bool, int, float, str})
_NAMES: dict[type, tuple[str, ...]] = {}  # an attrs class -> its fields' names


def _plain(value: object) -> Any:  # noqa: ANN401 - JSON-ready data of any shape
    kind = type(value)
    if kind in _ATOMS:
        return value
    names = _NAMES.get(kind)
    if names is None and attrs.has(kind):
        names = _NAMES[kind] = tuple(field.name for field in attrs.fields(kind))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple | list | set | frozenset):
        return [_plain(item) for item in value]
    if isinstance(value, dict | MappingProxyType):
        return {_key(key): _plain(item) for key, item in value.items()}
    return value


def _key(key: object) -> object:
    found = _plain(key)
    return tuple(found) if isinstance(found, list) else found


def _format(error: BaseException, type_: type | None) -> str:
    from cattrs.errors import CattrsError, ForbiddenExtraKeysError
    from cattrs.v import format_exception as _cattrs_format

    if isinstance(error, ForbiddenExtraKeysError):
        keys = ", ".join(repr(k) for k in sorted(error.extra_fields))
        return f"unknown key {keys}" if len(error.extra_fields) == 1 else f"unknown keys {keys}"
    if isinstance(error, KeyError):
        return "required key missing"
    if isinstance(error, CattrsError) and " not in literal " in str(error):
        value, _, literal = str(error).partition(" not in literal ")
        choices = literal.removeprefix("typing.Literal[").removesuffix("]")
        return f"invalid value {value!r}: must be one of {choices}"
    if isinstance(error, ValueError | TypeError) and not str(error).startswith("invalid value"):
        return f"invalid value: {error}"
    return _cattrs_format(error, type_)


@cache
def converter() -> cattrs.Converter:
    """The shared converter (built once, on first use)."""
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(bytes, _structure_bytes)
    # Refuse coercions that would hide a typo: 3 is not a plugin name, "30" is not a number.
    conv.register_structure_hook(str, _strict(str))
    conv.register_structure_hook(bool, _strict(bool))
    conv.register_structure_hook(int, _strict(int))
    conv.register_structure_hook(float, _structure_float)
    items = conv.get_structure_hook(tuple[str, ...])

    def strings(value: object, type_: type) -> tuple[str, ...]:
        # A lone string is a sequence too; taking "PATH" as ("P", "A", "T", "H") hides a typo.
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list of strings, got {type(value).__name__} {value!r}")
        result: tuple[str, ...] = items(value, type_)
        return result

    conv.register_structure_hook_func(_homogeneous_tuple, strings)
    conv.register_unstructure_hook(bytes, lambda b: b.decode("utf-8", "replace"))
    _request_hook(conv)
    return conv


def _request_hook(conv: cattrs.Converter) -> None:
    """``env = {NAME = {secret = "HANDLE"}}`` in a request names a credential by handle."""
    from cattrs.gen import make_dict_structure_fn

    from .spec import ExecRequest

    plain = make_dict_structure_fn(ExecRequest, conv, _cattrs_forbid_extra_keys=True)

    def structure(data: object, _type: type) -> ExecRequest:
        if isinstance(data, Mapping) and isinstance(data.get("env"), Mapping):
            env, credentials = {}, dict(data.get("credentials") or {})
            for name, value in data["env"].items():
                if isinstance(value, Mapping):
                    if set(value) != {"secret"} or not isinstance(value["secret"], str):
                        raise ValueError(
                            f"env entry {name!r} must be a string or {{secret = HANDLE}}"
                        )
                    credentials[name] = value["secret"]
                else:
                    env[name] = value
            data = {**data, "env": env, "credentials": credentials}
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a table, got {type(data).__name__}")
        for key in ("gate", "workspace"):
            if key in data:
                raise ValueError(f"{key} is set by a caller in code, never in a request")
        return plain(data)

    conv.register_structure_hook(ExecRequest, structure)


def _homogeneous_tuple(type_: object) -> bool:
    args: tuple[object, ...] = getattr(type_, "__args__", ())
    return getattr(type_, "__origin__", None) is tuple and args[1:] == (...,)


def _strict(kind: type[T]) -> Callable[[object, type], T]:
    def structure(value: object, _type: type) -> T:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    return structure


def _structure_float(value: object, _type: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def _structure_bytes(value: object, _type: type) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"expected text, got {type(value).__name__}")


def _validation_error() -> type[Exception]:
    from cattrs.errors import ClassValidationError

    return ClassValidationError


def unstructure(obj: object) -> object:
    """Plain data (dicts, lists, strings) for ``obj``."""
    return converter().unstructure(obj)


def to_json(obj: object, *, indent: int | None = None) -> str:
    """``obj`` as JSON text."""
    return json.dumps(unstructure(obj), indent=indent, sort_keys=indent is not None)


def structure_or_problems(data: object, cls: type[T]) -> tuple[T | None, list[str]]:
    """Build a ``cls`` from plain data, or say every bad field with its path (never raises)."""
    try:
        return converter().structure(data, cls), []
    except _validation_error() as error:
        import cattrs

        return None, cattrs.transform_error(error, path="$", format_exception=_format)
    except (ValueError, TypeError) as error:
        return None, [f"invalid value: {error} @ $"]


def structure(data: object, cls: type[T]) -> T:
    """Build a ``cls`` from plain data.

    Raises:
        UsageError: listing every bad field with its path.
    """
    try:
        return converter().structure(data, cls)
    except _validation_error() as error:
        import cattrs

        problems = cattrs.transform_error(error, path="$", format_exception=_format)
        raise UsageError(
            f"malformed {cls.__name__}: " + "; ".join(problems),
            details={"problems": problems},
        ) from None
    except (ValueError, TypeError) as error:
        raise UsageError(f"malformed {cls.__name__}: {error}") from None


def from_json(text: str | bytes, cls: type[T]) -> T:
    """Parse JSON text into a ``cls``, with readable errors."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"not valid JSON: {error}") from None
    return structure(data, cls)


@cache
def _exact() -> cattrs.Converter:
    """The converter for values that travel between deciding and doing: bytes as base64,
    so a step's binary ``stdin`` arrives byte for byte."""
    import base64

    conv = converter().copy()
    conv.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))

    def structure_b64(value: object, _type: type) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"expected base64 text, got {type(value).__name__}")
        return base64.b64decode(value, validate=True)

    conv.register_structure_hook(bytes, structure_b64)
    return conv


def step_to_json(value: AdmittedStep | Carried) -> str:
    """An admitted step (or what carrying it out gave back) as JSON text for a doer."""
    return json.dumps(_exact().unstructure(value))


def step_from_json(text: str | bytes, cls: type[S]) -> S:
    """Parse :func:`step_to_json`'s text into ``cls`` (:class:`AdmittedStep` or
    :class:`Carried`).

    Raises:
        UsageError: not JSON, a field is malformed, or the step's version is not this one.
    """
    from .step import STEP_VERSION

    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"not valid JSON: {error}") from None
    if isinstance(data, Mapping) and data.get("version", STEP_VERSION) != STEP_VERSION:
        raise UsageError(
            f"a {cls.__name__} of version {data.get('version')!r}; this Stockade reads "
            f"version {STEP_VERSION}",
            hint="run the same Stockade version where it is decided and where it is done",
        )
    try:
        return _exact().structure(data, cls)
    except _validation_error() as error:
        import cattrs

        problems = cattrs.transform_error(error, path="$", format_exception=_format)
        raise UsageError(
            f"malformed {cls.__name__}: " + "; ".join(problems), details={"problems": problems}
        ) from None
    except (ValueError, TypeError) as error:
        raise UsageError(f"malformed {cls.__name__}: {error}") from None
