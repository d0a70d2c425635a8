"""Each column aimed through a golden run's layout: at the second save, rank 1's data file (rank 0's for
damage at rest), and N/A with its reason where the job gives it nothing to aim at."""

from resilience.faults.layout import Layout, LayoutFile
from resilience.job.base import Golden
from resilience.job.columns import COLUMNS, plan_for
from resilience.job.golden import Reference
from resilience.job.layout import JobLayout, Save


def reference(saves: list[int], last: int = 12, pointer: bool = True) -> Reference:
    files = [
        LayoutFile(f"iter_{{iteration:07d}}/rank_{r}.pt", "data", r, f"iter_{{iteration:07d}}/rank_{r}.pt.tmp", 10_000)
        for r in (0, 1)
    ]
    if pointer:
        files.append(LayoutFile("latest.txt", "pointer", 0, "latest.txt", 3))
    layout = Layout(last, tuple(files), False, "oplog")
    job = JobLayout(layout, tuple(Save(k + 1, s, {}) for k, s in enumerate(saves)), (0, 1))
    return Reference(Golden({s: 1.0 for s in range(1, last + 1)}, tuple(saves), last), job, "golden")


def test_the_second_save_rank_1_for_io_rank_0_for_damage():
    ref = reference([4, 8, 12])
    crash = plan_for("kill-rank-write", ref)
    [record] = crash.records
    assert record.kind == "rank_crash" and record.target.rank == 1 and record.trigger.at_byte == 4096
    assert record.target.path == "*/iter_0000008/rank_1.pt.tmp"
    between = plan_for("kill-job-between", ref)
    assert between.kill is not None and between.kill.at_step == 10 and between.next_step == 12
    flip = plan_for("bit-flip", ref)
    assert flip.damage_path == "iter_0000008/rank_0.pt" and flip.kill is not None and flip.kill.at_step == 10
    assert plan_for("enospc", ref).records[0].errno == "ENOSPC"
    assert plan_for("tracker-empty", ref).damage_path == "latest.txt"


def test_power_loss_slow_disk_and_chained_kills():
    ref = reference([4, 8, 12])
    power = plan_for("power-loss", ref)
    assert power.power_loss and power.kill is not None and power.kill.at_step == 10 and power.save.step == 8
    slow = plan_for("slow-disk", ref)
    assert [(r.kind, r.target.rank, r.target.path) for r in slow.records] == [
        ("slow_write", r, f"*/iter_0000008/rank_{r}.pt.tmp") for r in (0, 1)
    ]
    assert slow.kill is not None and slow.kill.after_ack == 8 and slow.kill.at_step is None
    chain = plan_for("chained", ref)
    assert chain.kill is not None and chain.kill.at_step == 6 and chain.save.step == 4  # killed after the first save
    [again] = chain.chain  # ... and in the restart, after the second: the last save is at the last step
    assert again.kill is not None and again.kill.at_step == 10 and again.save.step == 8 and again.next_step == 12
    assert len(plan_for("chained", reference([3, 6, 9, 12, 15], last=16)).chain) == 2  # three kills at most
    assert "needs two saves before the last step" in (plan_for("chained", reference([8, 12])).na or "")
    assert "acknowledged no save of step 8" in (plan_for("slow-disk", _unacked(ref)).na or "")


def _unacked(ref: Reference) -> Reference:
    golden = Golden(ref.golden.curve, (), ref.golden.last_step)
    return Reference(golden, ref.layout, ref.folder)


def test_nothing_to_aim_at_is_not_applicable_with_its_reason():
    for name in COLUMNS:
        assert "made no checkpoint" in (plan_for(name, reference([])).na or "")
    only_at_the_end = reference([12])
    assert plan_for("kill-rank-write", only_at_the_end).na is None  # a kill in that save still applies
    assert "its only save is at its last step" in (plan_for("truncate", only_at_the_end).na or "")
    assert "no step between them" in (plan_for("kill-job-between", reference([4, 5], last=5)).na or "")
    assert "keeps no tracker" in (plan_for("tracker-empty", reference([4, 8], pointer=False)).na or "")


def test_damage_finds_the_file_this_run_wrote_where_its_learned_name_holds_a_wildcard(tmp_path):
    from resilience.faults.kinds import Truncate
    from resilience.job.damage import apply

    # a folder named by the start time: the golden run learned it as 'run-*', this run wrote run-1733140001
    (tmp_path / "run-1733140001" / "step-8").mkdir(parents=True)
    shard = tmp_path / "run-1733140001" / "step-8" / "rank_0.pt"
    shard.write_bytes(b"x" * 64)
    done = apply(Truncate(), str(tmp_path), "run-*/step-8/rank_0.pt", [8])
    assert done is not None and shard.stat().st_size == 32


def test_an_aim_names_the_save_rank_and_byte():
    import pytest

    from resilience.errors import ConfigError

    ref = reference([4, 8, 12])
    crash = plan_for("kill-rank-write@save=1,rank=0,byte=100", ref)
    [record] = crash.records
    assert (record.target.rank, record.target.path, record.trigger.at_byte) == (0, "*/iter_0000004/rank_0.pt.tmp", 100)
    assert crash.column == "kill-rank-write@save=1,rank=0,byte=100"
    assert plan_for("truncate@save=2,rank=1", ref).damage_path == "iter_0000008/rank_1.pt"
    assert "is at the last step" in (plan_for("truncate@save=3", ref).na or "")
    assert "made 3 saves, not 5" in (plan_for("eio@save=5", ref).na or "")
    assert "rank 7 is not a rank of the job" in (plan_for("eio@rank=7", ref).na or "")
    with pytest.raises(ConfigError, match="is not an aim"):
        plan_for("eio@disk=1", ref)
