"""Rank processes running torch.distributed: forked locally over gloo.

`Job` and `run_ranks` import torch (the parent imports it once, before forking); they are imported on first
use, so reading or refusing a scenario does not pay for torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .outcomes import MAX_JOB_TIMEOUT, JobOutcome, RankContext, RankOutcome, check_seconds

if TYPE_CHECKING:
    from .local import Job, run_ranks


def __getattr__(name: str):
    if name in ("Job", "run_ranks"):
        from . import local

        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MAX_JOB_TIMEOUT", "Job", "JobOutcome", "RankContext", "RankOutcome", "check_seconds", "run_ranks"]
