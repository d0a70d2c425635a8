"""What became of each fault of a case: fired, never fired, not applicable, or nothing in this backend to
act on (why); the faults part of a case's row."""

from __future__ import annotations

from dataclasses import dataclass

from ..checkers.case import FIRED, NEVER_FIRED, NOT_IN_BACKEND
from ..faults import Fault, fired, read_firings
from . import faultplan


@dataclass(frozen=True)
class FaultOutcome:
    """What became of one fault: fired, never fired, not applicable or not in this backend (why)."""

    fault: Fault
    status: str
    detail: str

    def to_row(self) -> dict:
        return {"fault": str(self.fault), "status": self.status, "detail": self.detail}


def fault_statuses(configured: list[Fault], fault_log: str, outcomes: list[FaultOutcome]) -> list[dict]:
    """Each configured fault once, with what became of it: fired, never fired, or not applicable (why)."""
    out = []
    never = faultplan.unfired(configured, fault_log)
    for fault in configured:
        done = next((o for o in outcomes if o.fault is fault), None)
        if done is not None and done.status == NOT_IN_BACKEND:  # it never fired: nothing here to act on
            out.append(done)
        elif any(f is fault for f in never):
            out.append(FaultOutcome(fault, NEVER_FIRED, f"its trigger never came: {fault}"))
        elif done is not None:
            out.append(done)
        else:
            out.append(FaultOutcome(fault, FIRED, "fired"))
    out += [o for o in outcomes if not any(o.fault is f for f in configured)]
    return [o.to_row() for o in out]


def power_loss_fired(fault_log: str, fault: Fault) -> bool:
    """Whether a power-loss fault fired (the file system fires one only once a rank armed it): a firing
    of that very record (read back and compared as a Fault, faults.firings.fired) whose action is one."""
    return any(f.get("action") == "power_loss" for f in fired(fault, read_firings(fault_log)))
