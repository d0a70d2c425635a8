"""Rank processes running torch.distributed: forked locally over gloo."""
from .base import JobOutcome, RankContext, RankOutcome
from .local import Job, run_ranks

__all__ = ["Job", "JobOutcome", "RankContext", "RankOutcome", "run_ranks"]
