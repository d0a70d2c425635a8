"""Rank processes running torch.distributed: forked locally over gloo."""

from .base import MAX_JOB_TIMEOUT, JobOutcome, RankContext, RankOutcome, check_seconds
from .local import Job, run_ranks

__all__ = ["MAX_JOB_TIMEOUT", "Job", "JobOutcome", "RankContext", "RankOutcome", "check_seconds", "run_ranks"]
