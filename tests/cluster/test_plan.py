"""Cluster plans, the torchrun environment, the command lines printed for each node (no process started)."""

import argparse
import os
import shlex

import pytest

from resilience.cli import main
from resilience.cluster import ClusterPlan, TorchrunEnv
from resilience.cluster.nodes import torchrun_commands
from resilience.cluster.worker import (
    STORE_FIX,
    add_plan_arguments,
    check_restart_store,
    main as worker_main,
    plan_argv,
    plan_from_args,
)
from resilience.errors import ConfigError, InvalidCombination
from resilience.faults import fault_from_dict
from resilience.state import Topology
from resilience.vocab.combos import Combination


def _parse(argv):
    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    return plan_from_args(p.parse_args(argv))


def test_default_plan_covers_every_combination_with_one_kill_each():
    plan = _parse([])
    assert len(plan.combos) == 6 and plan.killed() == list(plan.combinations) and plan.restarts_needed() == 6
    assert [str(c) for c in plan.combinations] == list(plan.combos)  # read once from the plan's text
    assert plan.topology(4) == Topology(2, 1, 2) and plan.topology(3) == Topology(1, 1, 3)
    killed = {"kind": "rank_crash", "target": {"rank": 3}, "trigger": {"phase": "write"}}
    assert plan.kill_record(4) == fault_from_dict(killed)


def test_kill_last_needs_one_restart():
    plan = _parse(["--combos", "LEGACY/torch/sync", "LOCAL/torch/sync", "--kill", "last"])
    assert plan.killed() == [Combination.parse("LOCAL/torch/sync")] and plan.restarts_needed() == 1


def test_plan_round_trips_through_the_worker_options():
    plan = _parse(
        [
            "--combos",
            "GLOBAL/torch_dist/async",
            "--kill",
            "last",
            "--kill-phase",
            "commit_rename",
            "--kill-rank",
            "1",
            "--tp",
            "1",
            "--pp",
            "2",
            "--hidden",
            "64",
            "--layers",
            "2",
            "--optimizer",
            "adam",
        ]
    )
    assert _parse(plan_argv(plan)) == plan
    assert ClusterPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"combos": ("GLOBAL/torch/sync",)}, "format"),
        ({"kill": "sometimes"}, "kill"),
        ({"kill_phase": "lunch"}, "kill_phase"),
        ({"tp": 0}, "tp"),
        ({"combos": ()}, "combos"),
    ],
)
def test_bad_plans_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        ClusterPlan(**kwargs)
    assert e.value.field == field


def test_topology_and_kill_rank_must_fit_the_world():
    with pytest.raises(ConfigError, match="does not divide"):
        ClusterPlan(tp=4).topology(6)
    with pytest.raises(ConfigError, match="out of range"):
        ClusterPlan(kill_rank=4).kill_target(4)
    with pytest.raises(InvalidCombination):
        _parse(["--combos", "LEGACY/torch/async"])


def test_torchrun_env_and_the_shared_store_refusal():
    env = TorchrunEnv.from_environ(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "1",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1",
            "TORCHELASTIC_RESTART_COUNT": "1",
            "TORCHELASTIC_MAX_RESTARTS": "2",
            "TORCHELASTIC_RUN_ID": "r",
        }
    )
    assert (env.rank, env.world, env.group_rank, env.restart_count, env.max_restarts) == (3, 4, 1, 1, 2)
    with pytest.raises(ConfigError, match=STORE_FIX):
        check_restart_store(env, {"TORCHELASTIC_USE_AGENT_STORE": "True"})
    check_restart_store(env, {"TORCHELASTIC_USE_AGENT_STORE": "False"})
    with pytest.raises(ConfigError, match="torchrun"):
        TorchrunEnv.from_environ({})


def test_worker_outside_torchrun_is_one_clear_error(tmp_path, capsys, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert worker_main(["--shared", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "this runs under torchrun" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_command_lines_of_each_node():
    plan = _parse(["--combos", "LEGACY/torch/sync", "GLOBAL/torch_dist/sync"])
    cmds = torchrun_commands(
        plan, shared="/shared/v", nnodes=3, nproc_per_node=2, rdzv_endpoint="node0:29500", rdzv_id="v1"
    )
    assert [c.node_rank for c in cmds] == [0, 1, 2]
    for c in cmds:
        argv = shlex.split(c.shell())
        assert argv[0] == f"{STORE_FIX}=1" and argv[1] == "torchrun"
        opts = dict(zip(argv[2::1], argv[3::1]))
        assert opts["--nnodes"] == "3" and opts["--nproc-per-node"] == "2"
        assert opts["--node-rank"] == str(c.node_rank) and opts["--rdzv-backend"] == "c10d"
        assert opts["--rdzv-endpoint"] == "node0:29500" and opts["--max-restarts"] == "2"
        assert opts["-m"] == "resilience.cluster.worker" and opts["--shared"] == "/shared/v"
    with pytest.raises(ConfigError, match="fewer than"):
        torchrun_commands(
            plan, shared="/s", nnodes=2, nproc_per_node=2, rdzv_endpoint="h:1", rdzv_id="x", max_restarts=1
        )
    with pytest.raises(ConfigError, match="HOST:PORT"):
        torchrun_commands(plan, shared="/s", nnodes=2, nproc_per_node=2, rdzv_endpoint="h", rdzv_id="x")


def test_validate_prints_what_to_run_on_each_node(capsys):
    code = main(
        [
            "validate",
            "--shared",
            "/mnt/shared/v1",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "8",
            "--rdzv-endpoint",
            "node0:29500",
            "--rdzv-id",
            "pre-upgrade",
            "--kill",
            "last",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "world 16 as tp2pp1dp8" in out and "# node 0 (serves the rendezvous at node0:29500)" in out
    lines = [ln for ln in out.splitlines() if ln.startswith(f"{STORE_FIX}=1 torchrun")]
    assert len(lines) == 2 and "--node-rank 1" in lines[1] and "--max-restarts 1" in lines[0]
    assert "$SLURM_NODEID" in out and "resilience validate --show /mnt/shared/v1" in out


def test_validate_out_makes_the_shared_folder_under_it(tmp_path, capsys):
    code = main(
        ["validate", "--out", str(tmp_path), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", "node0:29500"]
    )
    out = capsys.readouterr().out
    (shared,) = tmp_path.iterdir()  # a new run folder, as every command's --out makes one
    assert code == 0 and shared.name.endswith("-validate") and not os.listdir(shared)
    assert f"resilience validate --show {shared}" in out


def test_validate_needs_the_cluster_or_local(capsys):
    assert main(["validate", "--shared", "/x"]) == 2
    assert "--rdzv-endpoint" in capsys.readouterr().err
    assert main(["validate", "--show", "/nonexistent/run"]) == 2


@pytest.mark.parametrize(
    "argv, replay",
    [
        (
            ["resilience", "validate", "--local", "--shared", "/x/v", "--combos", "LOCAL/torch/sync"],
            "resilience validate --local --combos LOCAL/torch/sync",
        ),
        (["resilience", "validate", "--local", "--shared=/x/v"], "resilience validate --local"),
        (["pytest"], "resilience validate --local"),
    ],
)
def test_the_report_of_a_local_validation_replays_with_the_command_a_person_ran(monkeypatch, argv, replay):
    """Not the worker's own line (which needs torchrun around it), and into a new shared folder: the one
    given is not empty once the run wrote into it."""
    from resilience.commands.validate import _replay

    monkeypatch.setattr("sys.argv", argv)
    assert _replay() == replay


def test_a_plan_reads_its_combinations_once_and_writes_them_one_way():
    plan = ClusterPlan(combos=("local/torch/sync", Combination.parse("GLOBAL/torch_dist/async")))  # type: ignore[arg-type]
    assert plan.combos == ("LOCAL/torch/sync", "GLOBAL/torch_dist/async")  # as the plan file holds them
    assert plan.combinations == (Combination.parse("LOCAL/torch/sync"), Combination.parse("GLOBAL/torch_dist/async"))
    assert plan.combinations is plan.combinations  # read once
    assert ClusterPlan.from_dict(plan.to_dict()) == plan and plan.fuse_arm(plan.combinations[1]) == 2
