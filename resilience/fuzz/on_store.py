"""Drawn scenarios on an object store (`resilience fuzz --storage s3`): a fault drawn on a write becomes the
fault of the request that carries that write to the store, carried out by the fault proxy. Each maps one to
one, so Hypothesis draws and shrinks the same actions either way and the case's YAML says what ran:

- io_error (a write refused) -> http_error: the upload answered 503 SlowDown (or 500 when the drawn errno is
  EIO), on both tries of the client, so the failure reaches the implementation;
- torn_write (a write that lands in part) -> connection_reset: the upload cut mid-body;
- short_write (a write that says it wrote less) -> response_lost: the upload done, its answer lost;
- slow_write -> slow_write of the upload request.

Every other fault (a crash at a phase or a byte, damage at rest, a kill) stays as drawn."""

from __future__ import annotations

from dataclasses import replace

from ..runner.scenario_model import Scenario, Step

_UPLOAD = "put"


def _records(kind: str, fault: dict) -> list[dict]:
    if fault.get("op") not in (None, "write", "create", "close"):
        return []  # a fault of an fsync or a rename: the seam in the rank still carries it
    where = {k: fault[k] for k in ("rank", "path", "nth") if k in fault}
    if kind == "io_error":
        status = 500 if fault.get("errno") == "EIO" else 503
        first = {"kind": "http_error", "status": status, **where, "op": _UPLOAD}
        return [first, {**first, "nth": int(where.get("nth", 1)) + 1}]
    if kind == "torn_write":
        return [{"kind": "connection_reset", **where, "op": _UPLOAD}]
    if kind == "short_write":
        return [{"kind": "response_lost", **where, "op": _UPLOAD}]
    if kind == "slow_write":
        return [{"kind": "slow_write", "delay": fault.get("delay", 0.05), **where, "op": _UPLOAD}]
    return []


def requests_of_writes(scenario: Scenario) -> Scenario:
    """The scenario with each drawn write fault made the fault of its upload request."""
    from ..faults import fault_from_dict

    steps: list[Step] = []
    for s in scenario.steps:
        args = s.args if isinstance(s.args, dict) else {}
        records = _records(str(args.get("kind")), args) if s.kind == "fault" else []
        if not records:
            steps.append(s)
            continue
        steps += [Step("fault", r, s.line, fault_from_dict(r)) for r in records]
    return replace(scenario, steps=steps)


__all__ = ["requests_of_writes"]
