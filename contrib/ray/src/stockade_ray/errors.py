"""The errors a pool gives a step that its worker could not finish."""

from __future__ import annotations

from stockade.errors import StockadeError


class WorkerLost(StockadeError):
    """The worker carrying out the step died (its actor or its node was killed, or it
    crashed) before it gave a result back. The command died with the worker; the record
    holds an ``error`` event with this code, and the pool has started another worker."""

    code = "worker_lost"


class StepCancelled(StockadeError):
    """The step was cancelled (``ray.cancel`` on its reference, or the pool shut down): the
    worker killed the command and everything it started."""

    code = "cancelled"


class RemoteFailure(StockadeError):
    """The worker failed with an error this driver does not know by its code (the code is in
    ``details["code"]``), or the worker itself raised something unexpected."""

    code = "remote_failure"


def rebuilt(data: dict[str, object]) -> StockadeError:
    """The error a worker reported (:meth:`StockadeError.to_dict`), as the class with its
    code where this process knows one, else :class:`RemoteFailure`."""
    code = str(data.get("code", ""))
    message = str(data.get("message", ""))
    hint = data.get("hint")
    raw = data.get("details")
    details = dict(raw) if isinstance(raw, dict) else {}
    known = _by_code().get(code)
    if known is None:
        return RemoteFailure(
            message, hint=str(hint) if hint else None, details={**details, "code": code}
        )
    error = known.__new__(known)
    StockadeError.__init__(error, message, hint=str(hint) if hint else None, details=details)
    return error


def _by_code() -> dict[str, type[StockadeError]]:
    """Every loaded :class:`StockadeError` class, by its code (the first one met wins)."""
    found: dict[str, type[StockadeError]] = {}
    todo: list[type[StockadeError]] = [StockadeError]
    while todo:
        cls = todo.pop(0)
        found.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return found
