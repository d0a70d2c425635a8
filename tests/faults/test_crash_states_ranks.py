"""Lost unsynced writes on real multi-rank saves: every crash state a power loss can leave loads the newest
checkpoint that is durable in that state, bit-exact, on every combination."""

import pytest

from resilience.faults import LostUnsyncedWrites, Snapshot, faults_from, power_loss_states, read_firings

from .ranks import (
    ALL,
    combos,
    died_by_sigkill,
    is_local,
    load_all,
    newest_durable,
    run_job,
    save_under_faults,
    shard_glob,
)

pytestmark = pytest.mark.multiprocess

MAX_STATES = 6


def _cases(combo):
    """(id, where the power goes, newest durable checkpoint in every state, for global layouts)."""
    return [
        ("after-save", {}, 2),  # a save reported done survives the loss of every unsynced write
        ("mid-shard", {"rank": 1, "path": shard_glob(combo, 1), "at_byte": 3000}, 1),
        (
            "after-publish-rename",
            {"rank": 1 if is_local(combo) else 0, "op": "rename", "when": "after", "path": "*/iter_0000002"},
            None,
        ),
    ]


@pytest.mark.parametrize("combo", combos(*ALL))
def test_every_crash_state_resumes_from_a_durable_checkpoint(tmp_path, combo):
    roots, newest, names = [], [], []
    for name, point, expect in _cases(combo):
        case = tmp_path / name
        case.mkdir()
        [fault] = faults_from([{"kind": "lost_unsynced_writes", "max_states": MAX_STATES, **point}], world=2)
        assert isinstance(fault, LostUnsyncedWrites)
        root = case / "ckpt"
        outcome = run_job(
            save_under_faults,
            combo,
            str(root),
            [fault],
            str(case / "fired.jsonl"),
            str(case / "ops"),
            str(case / "snapshot"),
        )
        fired = read_firings(case / "fired.jsonl")
        assert fired and {f["action"] for f in fired} == {"power_loss"}, (name, fired)
        if point:
            assert died_by_sigkill(outcome, point["rank"]), (name, outcome.failures)
        else:
            assert outcome.ok and [r["outcome"] for r in outcome.results] == ["ok", "ok"]
        states = power_loss_states(
            fault, Snapshot(str(root.resolve()), str(case / "snapshot")), case / "ops", case / "states"
        )
        assert 1 <= len(states.states) <= MAX_STATES and states.explored >= len(states.states)
        if not point:
            # the reference fsyncs every file and folder it writes before it reports the save done
            assert states.unsynced == [], [str(states.ops[i]) for i in states.unsynced]
        for s in states.states:
            durable = newest_durable(combo, s.path)
            if expect is not None and not is_local(combo):
                assert durable == expect, (name, s.how, durable)
            assert durable in (1, 2), (name, s.how, durable)
            roots.append(s.path)
            newest.append(durable)
            names.append(f"{name}: {s.how}")
    for name, want, got in zip(names, newest, load_all(combo, roots)):
        assert got.get("iteration") == want, (name, got)
        assert got["fingerprint_ok"], (name, got)
