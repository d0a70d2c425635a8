"""Whether a power loss fired is read from the firings as Fault records (faults.firings.fired), never by
comparing a fault's text with the text a firing carries."""

from __future__ import annotations

import json

from resilience.faults import faults_from, firing
from resilience.runner.fault_outcomes import power_loss_fired


def _log(tmp_path, *firings) -> str:
    path = tmp_path / "faults.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in firings))
    return str(path)


def test_a_power_loss_fired_when_a_firing_of_that_record_says_so(tmp_path):
    lost, other = faults_from([{"kind": "lost_unsynced_writes"}, {"kind": "lost_unsynced_writes", "max_states": 4}])
    assert power_loss_fired(_log(tmp_path, firing(lost, "power_loss", via="fuse")), lost)
    assert not power_loss_fired(_log(tmp_path, firing(other, "power_loss", via="fuse")), lost)  # another record
    assert not power_loss_fired(_log(tmp_path, firing(lost, "record", via="fuse")), lost)  # not a power loss
    assert not power_loss_fired(str(tmp_path / "none.jsonl"), lost)


def test_the_text_of_a_firing_does_not_decide(tmp_path):
    lost, other = faults_from([{"kind": "lost_unsynced_writes"}, {"kind": "lost_unsynced_writes", "max_states": 4}])
    # a firing whose text reads as `lost` but whose record is another fault: not a firing of `lost`
    forged = dict(firing(other, "power_loss", via="fuse"), text=str(lost))
    assert not power_loss_fired(_log(tmp_path, forged), lost)
    # and the record decides when the text is missing
    bare = {k: v for k, v in firing(lost, "power_loss", via="fuse").items() if k != "text"}
    assert power_loss_fired(_log(tmp_path, bare), lost)
