"""Checkers: history + disk -> verdict with evidence."""
from .atomic import AtomicCommit
from .base import FAIL, NA, PASS, REFUSED, UNKNOWN, UNPROBED, Evidence, LoadRecord, SaveRecord, Verdict, run_checker, worst
from .durability import Durability
from .integrity import Integrity
from .resume import ResumeEquivalence
from .topology import TopologyIndependence, expected_loadable

ALL = (AtomicCommit(), Durability(), Integrity(), ResumeEquivalence(), TopologyIndependence())

__all__ = ["ALL", "AtomicCommit", "Durability", "Evidence", "FAIL", "Integrity", "LoadRecord", "NA", "PASS",
           "REFUSED", "ResumeEquivalence", "SaveRecord", "TopologyIndependence", "UNKNOWN", "UNPROBED", "Verdict",
           "expected_loadable", "run_checker", "worst"]
