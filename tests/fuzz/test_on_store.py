"""Drawn write faults on an object store become the faults of their upload requests, one to one (pure)."""

from resilience.runner.on_store import requests_of_writes
from resilience.runner.scenario import load_text

DRAWN = """
name: drawn
topology: tp1pp1dp2
steps:
  - train: 1
  - fault: {kind: io_error, rank: 1, path: "@data", errno: ENOSPC, op: write}
  - fault: {kind: torn_write, rank: 0, path: "@data"}
  - fault: {kind: short_write, rank: 0, path: "@metadata"}
  - fault: {kind: slow_write, rank: 1, delay: 0.1, path: "@data"}
  - fault: {kind: io_error, rank: 1, errno: EIO, op: fsync}
  - save
"""


def test_each_write_fault_becomes_its_upload_request_fault():
    out = requests_of_writes(load_text(DRAWN))
    faults = [s.fault for s in out.steps if s.fault is not None]
    assert [(f.kind, f.target.op) for f in faults] == [
        ("http_error", "put"),
        ("http_error", "put"),
        ("connection_reset", "put"),
        ("response_lost", "put"),
        ("slow_write", "put"),
        ("io_error", "fsync"),  # an fsync's failure: the seam in the rank still carries it
    ]
    assert [f.trigger.nth for f in faults[:2]] == [1, 2] and faults[0].status == 503  # both tries of the client
    assert faults[2].target.rank == 0 and faults[2].target.path == "@data"
