"""Checkers: history + disk -> verdict with evidence."""

from .atomic import AtomicCommit
from .base import (
    FAIL,
    FAILING,
    NA,
    PASS,
    REFUSED,
    UNKNOWN,
    UNPROBED,
    WARN,
    Status,
    Verdict,
    is_failing,
    run_checker,
    worst,
)
from .durability import Durability
from .evidence import Evidence, FileOp, LoadRecord, SaveRecord
from .exceptions import ExceptionContract
from .generations import Generations
from .integrity import Integrity
from .liveness import Liveness
from .precision import PrecisionOnResume
from .recovery import Recovery
from .resume import ResumeEquivalence
from .retention import Retention
from .saves import SaveOutcomes
from .symmetry import FailureSymmetry
from .topology import TopologyIndependence, promised

ALL = (
    AtomicCommit(),
    Durability(),
    Integrity(),
    ResumeEquivalence(),
    TopologyIndependence(),
    SaveOutcomes(),
    Generations(),
    ExceptionContract(),
    FailureSymmetry(),
    PrecisionOnResume(),
    Recovery(),
    Liveness(),
    Retention(),
)

__all__ = [
    "ALL",
    "AtomicCommit",
    "Durability",
    "Evidence",
    "ExceptionContract",
    "FAIL",
    "FAILING",
    "FailureSymmetry",
    "FileOp",
    "Generations",
    "Integrity",
    "Liveness",
    "LoadRecord",
    "NA",
    "PASS",
    "PrecisionOnResume",
    "REFUSED",
    "Recovery",
    "ResumeEquivalence",
    "Retention",
    "SaveOutcomes",
    "SaveRecord",
    "Status",
    "TopologyIndependence",
    "UNKNOWN",
    "UNPROBED",
    "WARN",
    "Verdict",
    "is_failing",
    "promised",
    "run_checker",
    "worst",
]
