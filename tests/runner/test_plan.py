"""The planner: a scenario's steps become jobs (rank ops, faults armed at an op, kills beside the job,
actions once it ended, faults set aside with why). Pure logic: scenarios from text, no ranks."""

import pytest

from resilience.faults import LostUnsyncedWrites, RankKill, Target, Trigger
from resilience.runner.aiming import OUTSIDE_SEAM
from resilience.runner.plan import ArmedFault, Corruption, PowerLoss, plan_jobs
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

from .test_aim import DCP, SCAN

SYNC = Combination.parse("LEGACY/torch/sync")
ASYNC = Combination.parse("GLOBAL/torch_dist/async")
DCP_SYNC = Combination.parse("TORCH_DCP/torch_dcp/sync")


def jobs_of(steps: str, combo=SYNC, layout=None, topology="tp2pp1dp1"):
    return plan_jobs(load_text(f"topology: {topology}\nsteps:\n{steps}", "plan.yaml"), combo, layout)


def summary(jobs) -> list[dict]:
    """Each job as {"job": "kind topology", "ops": [...]} plus its faults, kills, after and unreachable
    when it has any: short enough to write a table of."""
    out = []
    for j in jobs:
        d = {
            "job": f"{j.kind} {j.topo}",
            "ops": [" ".join([op["op"]] + ([str(op["steps"])] if "steps" in op else [])) for op in j.ops],
        }
        if j.faults:
            d["faults"] = [(f.fault.kind, f.arm_at) for f in j.faults]
        if j.kills:
            d["kills"] = [k.fault.kind for k in j.kills]
        if j.after:
            d["after"] = [("corrupt" if isinstance(a, Corruption) else "power_loss", a.fault.kind) for a in j.after]
        if j.unreachable:
            d["unreachable"] = [u.fault.kind for u in j.unreachable]
        out.append(d)
    return out


TRAIN = "train tp2pp1dp1"
RESUME = "resume tp2pp1dp1"
PROBE = {"job": "probe tp2pp1dp1", "ops": ["load", "continue 2"]}

CASES = {
    "a resume loads and continues": (
        "  - train: 2\n  - save\n  - resume: {}\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 2", "save"]}, {"job": RESUME, "ops": ["load", "continue 2"]}],
    ),
    "no load in the scenario: a probe ends it": (
        "  - train: 2\n  - save\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 2", "save"]}, PROBE],
    ),
    "async: a job that saved finalizes before it exits": (
        "  - train: 2\n  - save\n  - resume: {continue: 1}\n",
        ASYNC,
        [{"job": TRAIN, "ops": ["train 2", "save", "finalize"]}, {"job": RESUME, "ops": ["load", "continue 1"]}],
    ),
    "a resume elsewhere that does not continue": (
        "  - train: 1\n  - save\n  - resume: {topology: tp1pp1dp2, continue: 0}\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 1", "save"]}, {"job": "resume tp1pp1dp2", "ops": ["load"]}],
    ),
    "nothing saved: nothing to probe": ("  - train: 3\n", SYNC, [{"job": TRAIN, "ops": ["train 3"]}]),
    "a resume first: the empty first job is dropped": (
        "  - resume: {}\n",
        SYNC,
        [{"job": RESUME, "ops": ["load", "continue 2"]}],
    ),
    "a save after a resume: probed again": (
        "  - train: 1\n  - save\n  - resume: {continue: 0}\n  - save\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 1", "save"]}, {"job": RESUME, "ops": ["load", "save"]}, PROBE],
    ),
    "a crash is armed at the op its step precedes": (
        "  - train: 1\n  - save\n  - crash: {rank: 1, phase: write}\n  - train: 1\n  - save\n  - resume: {}\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save", "train 1", "save"], "faults": [("rank_crash", 2)]},
            {"job": RESUME, "ops": ["load", "continue 2"]},
        ],
    ),
    "an in-process fault record is armed like a crash": (
        "  - train: 1\n  - fault: {kind: slow_write, delay: 0.01}\n  - save\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 1", "save"], "faults": [("slow_write", 1)]}, PROBE],
    ),
    "a fault in a resumed job counts that job's ops": (
        "  - train: 1\n  - save\n  - resume: {continue: 1}\n  - crash: {rank: 0, phase: write}\n  - save\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"]},
            {"job": RESUME, "ops": ["load", "continue 1", "save"], "faults": [("rank_crash", 2)]},
            PROBE,
        ],
    ),
    "a kill runs beside its job": (
        "  - train: 1\n  - kill: {rank: 0, after: 0.5}\n  - save\n  - resume: {}\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"], "kills": ["rank_kill"]},
            {"job": RESUME, "ops": ["load", "continue 2"]},
        ],
    ),
    "a hang is a kill step too": (
        "  - train: 1\n  - kill: {kind: rank_hang, rank: 1, after: 0.1}\n  - save\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 1", "save"], "kills": ["rank_hang"]}, PROBE],
    ),
    "a corruption at the end: damage after the job, then a probe": (
        "  - train: 2\n  - save\n  - corrupt: {kind: truncate}\n",
        SYNC,
        [{"job": TRAIN, "ops": ["train 2", "save"], "after": [("corrupt", "truncate")]}, PROBE],
    ),
    "a corruption then a resume: the resume is the load": (
        "  - train: 2\n  - save\n  - corrupt: {kind: bitflip}\n  - resume: {}\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 2", "save"], "after": [("corrupt", "bit_flip")]},
            {"job": RESUME, "ops": ["load", "continue 2"]},
        ],
    ),
    "a corruption after the last load: probed again": (
        "  - train: 1\n  - save\n  - resume: {continue: 0}\n  - corrupt: {kind: truncate}\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"]},
            {"job": RESUME, "ops": ["load"], "after": [("corrupt", "truncate")]},
            PROBE,
        ],
    ),
    "an at-rest fault record is a corruption": (
        "  - train: 1\n  - save\n  - fault: {kind: delete_file}\n  - resume: {}\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"], "after": [("corrupt", "delete_file")]},
            {"job": RESUME, "ops": ["load", "continue 2"]},
        ],
    ),
    "training after a corruption: a new job resumes first": (
        "  - train: 1\n  - save\n  - corrupt: {kind: bitflip}\n  - train: 1\n  - save\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"], "after": [("corrupt", "bit_flip")]},
            {"job": RESUME, "ops": ["load", "train 1", "save"]},
            PROBE,
        ],
    ),
    "a power loss is armed at its op and built once the job ended": (
        "  - train: 1\n  - save\n  - lose_unsynced: {}\n  - train: 1\n  - save\n",
        SYNC,
        [
            {
                "job": TRAIN,
                "ops": ["train 1", "save", "train 1", "save"],
                "faults": [("lost_unsynced_writes", 2)],
                "after": [("power_loss", "lost_unsynced_writes")],
            },
            PROBE,
        ],
    ),
    # a fault step after a corruption belongs to the job that the damage is done before, not to the
    # finished one (there it would be armed after its last op and never fire)
    "a crash after a corruption goes to the next job": (
        "  - train: 1\n  - save\n  - corrupt: {kind: bitflip}\n  - crash: {rank: 1, phase: write}\n  - save\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"], "after": [("corrupt", "bit_flip")]},
            {"job": RESUME, "ops": ["load", "save"], "faults": [("rank_crash", 1)]},
            PROBE,
        ],
    ),
    "a kill after a corruption goes to the next job": (
        "  - train: 1\n  - save\n  - corrupt: {kind: bitflip}\n  - kill: {rank: 1, after: 0.1}\n  - save\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"], "after": [("corrupt", "bit_flip")]},
            {"job": RESUME, "ops": ["load", "save"], "kills": ["rank_kill"]},
            PROBE,
        ],
    ),
    "a power loss after a corruption goes to the next job": (
        "  - train: 1\n  - save\n  - corrupt: {kind: bitflip}\n  - lose_unsynced: {}\n  - save\n",
        SYNC,
        [
            {"job": TRAIN, "ops": ["train 1", "save"], "after": [("corrupt", "bit_flip")]},
            {
                "job": RESUME,
                "ops": ["load", "save"],
                "faults": [("lost_unsynced_writes", 1)],
                "after": [("power_loss", "lost_unsynced_writes")],
            },
            PROBE,
        ],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_jobs_of_a_scenario(name):
    steps, combo, expected = CASES[name]
    assert summary(jobs_of(steps, combo)) == expected


def test_a_power_loss_action_is_the_armed_record_itself():
    [job, _] = jobs_of("  - train: 1\n  - lose_unsynced: {max_states: 4}\n  - save\n")
    [armed] = job.faults
    assert job.after == [PowerLoss(armed.fault)] and job.after[0].fault is armed.fault
    assert armed == ArmedFault(LostUnsyncedWrites(max_states=4), 1)


def test_a_fault_after_the_last_operation_strikes_the_resumes_load_and_a_power_loss_stays():
    steps = (
        "  - train: 1\n  - save\n  - fault: {kind: rank_crash, rank: 1, op: read, when: before}\n"
        "  - lose_unsynced: {max_states: 4}\n  - resume: {continue: 1}\n"
    )
    [first, resumed] = jobs_of(steps)
    [loss] = first.faults
    assert isinstance(loss.fault, LostUnsyncedWrites) and first.after == [PowerLoss(loss.fault)]
    [crash] = resumed.faults
    assert crash.arm_at == 0 and crash.fault.target.op == "read" and resumed.ops[0] == {"op": "load"}


def test_each_fault_is_the_record_its_step_was_read_into_once():
    """The planner takes the scenario's records as they are: no second reading of the step's options."""
    scenario = load_text(
        "topology: tp2pp1dp1\nsteps:\n  - train: 1\n  - crash: {rank: 1, phase: write}\n"
        "  - save\n  - kill: {rank: 0, when: {after: 0.5}}\n  - corrupt: {kind: bitflip, seed: 3}\n",
        "plan.yaml",
    )
    crash, kill, flip = (s.fault for s in scenario.steps if s.fault is not None)
    [job, _] = plan_jobs(scenario, SYNC)
    assert job.faults[0].fault is crash and job.kills[0].fault is kill and job.after == [Corruption(flip)]
    assert job.kills == [ArmedFault(RankKill(target=kill.target, trigger=kill.trigger), 2)]
    assert (kill.target.rank, kill.trigger.after, flip.seed) == (0, 0.5, 3)


# ---- aimed through a learned layout (DCP: step-{iteration}/__{rank}_0.distcp, written through the seam) --
def test_a_layout_target_is_a_data_file_of_the_next_save_after_the_step():
    [job, _] = jobs_of(
        "  - train: 1\n  - save\n  - fault: {kind: io_error, rank: 1, path: '@data', errno: EIO}\n"
        "  - train: 2\n  - save\n",
        DCP_SYNC,
        DCP,
    )
    assert [f.fault.target.path for f in job.faults] == ["*/step-3/__1_0.distcp"] and not job.unreachable
    assert [f.arm_at for f in job.faults] == [2]  # armed at the op after the first save


def test_a_layout_target_in_a_resumed_job_matches_any_iteration():
    [_, job, _] = jobs_of(
        "  - train: 1\n  - save\n  - resume: {continue: 0}\n"
        "  - fault: {kind: io_error, rank: 1, path: '@data', errno: EIO}\n  - save\n",
        DCP_SYNC,
        DCP,
    )
    assert [f.fault.target.path for f in job.faults] == ["*/step-*/__1_0.distcp"]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            "  - train: 1\n  - kill: {rank: 1, file: '@data#2', size: 100}\n  - save\n  - train: 2\n  - save\n",
            id="before the first save, the second save",
        ),
        pytest.param(
            "  - train: 1\n  - save\n  - kill: {rank: 1, file: '@data', size: 100}\n  - train: 2\n  - save\n",
            id="after the first save, the next save",
        ),
    ],
)
def test_a_kill_aimed_at_a_data_file_strikes_the_save_its_step_names(steps):
    [job, _] = jobs_of(steps, DCP_SYNC, DCP)
    assert [(k.fault.target.path, k.fault.trigger.size) for k in job.kills] == [("*/step-3/__1_0.distcp", 100)]


def test_a_phase_the_backend_never_reaches_is_unreachable_with_why():
    [job, _] = jobs_of("  - train: 1\n  - crash: {rank: 1, phase: tracker_update}\n  - save\n", DCP_SYNC, DCP)
    assert job.faults == [] and [u.fault.kind for u in job.unreachable] == ["rank_crash"]
    assert "never reaches a 'tracker_update' phase" in job.unreachable[0].why
    assert job.unreachable[0].fault.trigger.phase == "tracker_update"  # kept as the scenario wrote it


def test_outside_the_seam_in_process_faults_and_their_power_loss_are_set_aside():
    [job, _] = jobs_of(
        "  - train: 1\n  - lose_unsynced: {}\n  - crash: {rank: 0, phase: write}\n  - save\n"
        "  - kill: {rank: 0, after: 0.2}\n",
        DCP_SYNC,
        SCAN,
    )
    assert job.faults == [] and job.after == []
    assert [(u.fault.kind, u.why) for u in job.unreachable] == [
        ("lost_unsynced_writes", OUTSIDE_SEAM),
        ("rank_crash", OUTSIDE_SEAM),
    ]
    assert [k.fault for k in job.kills] == [RankKill(Target(rank=0), Trigger(after=0.2))]  # from outside


def test_a_role_the_backend_has_no_file_of_is_unreachable():
    [job, _] = jobs_of("  - train: 1\n  - kill: {rank: 0, file: '@pointer', size: 1}\n  - save\n", DCP_SYNC, DCP)
    assert job.kills == [] and [u.fault.kind for u in job.unreachable] == ["rank_kill"]
    assert job.unreachable[0].why.startswith("rank 0 writes no pointer file")
