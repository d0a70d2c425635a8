"""Planning a sweep of a backend's declared options (`resilience matrix --backend-options`)."""

from __future__ import annotations

import pytest

from resilience.cli import main
from resilience.errors import ConfigError
from resilience.runner.adapters import declared_options
from resilience.runner.option_sweep import plan_sweep, refused_values
from resilience.vocab import Combination

SYNC, ASYNC = Combination.parse("TORCH_DCP/torch_dcp/sync"), Combination.parse("TORCH_DCP/torch_dcp/async")


def test_no_sweep_is_the_spec_alone():
    [only] = plan_sweep("dcp:thread_count=4", None)
    assert only.spec == "dcp:thread_count=4" and only.label == "defaults"


def test_all_is_the_defaults_then_each_value_one_at_a_time():
    plan = plan_sweep("dcp", ["all"])
    assert [c.label for c in plan] == [
        "defaults",
        "thread_count=4",
        "sync_files=false",
        "single_file_per_rank=false",
        "collectives=off",
        "collectives=no_dist",
        "async=process",
        "staging=background",
        "staging=shared",
        "process_group=default",
        "client=msc",
    ]
    assert plan[0].spec == "dcp" and plan[1].spec == "dcp:thread_count=4"
    by = {c.label: c for c in plan}
    assert by["sync_files=false"].applies_to(SYNC) and by["sync_files=false"].applies_to(ASYNC)
    assert by["async=process"].applies_to(ASYNC) and not by["async=process"].applies_to(SYNC)
    assert not any("pinned" in c.label or "cached" in c.label for c in plan)  # refused here, listed instead
    assert any(
        line.startswith("staging=pinned: pinned host memory needs CUDA")
        for line in refused_values(declared_options("dcp"))
    )


def test_named_options_and_options_fixed_by_the_spec():
    assert [c.spec for c in plan_sweep("dcp", ["async"])] == ["dcp", "dcp:async=process"]
    plan = plan_sweep("dcp:sync_files=false", ["all"])
    assert plan[0].spec == "dcp:sync_files=false" and "sync_files=false" not in [c.label for c in plan[1:]]
    assert plan[1].spec == "dcp:sync_files=false,thread_count=4"
    assert [c.spec for c in plan_sweep("resilience.backends.megatron:make", ["fully_parallel_load"])] == [
        "resilience.backends.megatron:make",
        "resilience.backends.megatron:make[fully_parallel_load=gather_object]",
    ]


@pytest.mark.parametrize(
    "backend, which, says",
    [
        ("reference", ["all"], "reference declares no options"),
        ("dcp", ["thread_cnt"], "no option 'thread_cnt' (give 'all' or option names: "),
        ("dcp", ["all", "async"], "'all' cannot be mixed with option names"),
        ("dcp:async=process", ["async"], "async is fixed by the backend spec"),
    ],
)
def test_a_bad_sweep_is_one_clear_error(backend, which, says):
    with pytest.raises(ConfigError, match="^--backend-options: ") as e:
        plan_sweep(backend, which)
    assert says in str(e.value)


def test_the_matrix_refuses_a_bad_option_before_any_case(tmp_path, capsys):
    for argv in (["--backend", "dcp:thread_count=0"], ["--backend", "dcp", "--backend-options", "nope"]):
        assert main(["matrix", *argv, "--out", str(tmp_path)]) == 2
        assert "error:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
