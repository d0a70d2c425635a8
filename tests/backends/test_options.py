"""Backend options as data: a spec's syntax, each adapter's declaration, one clear error for a wrong
name or value, and the spec reaching the backend inside a real rank process."""

from __future__ import annotations

import os

import pytest
from hypothesis import find, given, settings

from resilience.backends.options import Option, join_spec, resolve_options, split_spec
from resilience.errors import ConfigError
from resilience.runner.adapters import ALIASES, declared_options, make_backend, parse_backend, resolve
from resilience.runner.run import run_case
from resilience.runner.scenario import from_dict
from resilience.strategies import backend_specs
from resilience.vocab import Combination

DCP_SYNC = Combination.parse("TORCH_DCP/torch_dcp/sync")
DCP_ASYNC = Combination.parse("TORCH_DCP/torch_dcp/async")


@pytest.mark.parametrize(
    "spec, base, given",
    [
        ("dcp", "dcp", {}),
        ("dcp:thread_count=4,async=process", "dcp", {"thread_count": "4", "async": "process"}),
        (" dcp:sync_files=false ", "dcp", {"sync_files": "false"}),
        ("pkg.mod:factory[thread_count=4]", "pkg.mod:factory", {"thread_count": "4"}),
        ("pkg.mod:factory", "pkg.mod:factory", {}),  # not an alias: the part after ':' is the factory
        ("megatron[strict=raise_all]", "megatron", {"strict": "raise_all"}),
    ],
)
def test_a_spec_splits_into_backend_and_options(spec, base, given):
    assert split_spec(spec, ALIASES) == (base, given)


@pytest.mark.parametrize(
    "spec, says",
    [
        ("dcp:thread_count", "cannot read option 'thread_count' in 'dcp:thread_count' (write options as name=value"),
        ("dcp:thread_count=4,thread_count=2", "option thread_count given twice"),
        ("dcp:a=1;b=2", "cannot read option 'a=1;b=2'"),
        ("pkg.mod:f[x=]", "cannot read option 'x='"),
        ("reference[x=1]", "reference takes no options"),
        ("broken:ignores_topology[x=1]", "broken:ignores_topology takes no options"),
    ],
)
def test_a_spec_that_does_not_read_is_one_clear_error(spec, says):
    with pytest.raises(ConfigError, match="^backend: ") as e:
        parse_backend(spec)
    assert says in str(e.value)


@pytest.mark.parametrize(
    "spec, says",
    [
        ("dcp:thread_cnt=4", "dcp has no option 'thread_cnt' (its options are thread_count, sync_files,"),
        (
            "dcp:thread_count=0",
            "option thread_count='0' is not allowed (FileSystemWriter: writer threads per rank) "
            "(give thread_count= one of: an integer from 1 to 64; default 1)",
        ),
        ("dcp:async=fiber", "give async= one of: thread, process; default thread"),
        ("dcp:sync_files=maybe", "give sync_files= one of: true, false; default true"),
        ("dcp:staging=pinned", "option staging=pinned cannot run here: pinned host memory needs CUDA"),
        (
            "megatron:fully_parallel_load=broadcast",
            "cannot run here: exchange_utils allocates the exchanged shards on device 'cuda'",
        ),
        ("resilience.backends.stock_dcp:make[collectives=maybe]", "give collectives= one of: on, off, no_dist"),
        ("tests.backends.inhouse:factory[x=1]", "has no option 'x' (its options are none: it takes no options"),
    ],
)
def test_a_wrong_option_names_the_option_its_values_and_the_fix(spec, says):
    with pytest.raises(ConfigError) as e:
        make_backend(spec, DCP_SYNC)
    assert says in str(e.value), str(e.value)


def test_options_are_typed_and_an_alias_keeps_its_own():
    assert parse_backend(" dcp:async=process,thread_count=4 ") == "dcp:async=process,thread_count=4"
    assert resolve("dcp-threads") == "resilience.backends.stock_dcp:make[thread_count=4]"
    assert resolve("dcp-threads:thread_count=2") == "resilience.backends.stock_dcp:make[thread_count=2]"
    backend = make_backend("dcp:thread_count=4,sync_files=no,async=process", DCP_ASYNC)
    assert backend.opts["thread_count"] == 4 and backend.opts["sync_files"] is False
    assert (
        backend.opts["async"] == "process"
        and backend.name == "dcp(thread_count=4,sync_files=False,async=process):TORCH_DCP/torch_dcp/async"
    )
    assert make_backend("dcp-threads", DCP_SYNC).opts["thread_count"] == 4
    assert make_backend("dcp", DCP_SYNC).opts["thread_count"] == 1


def test_option_records_parse_and_refuse():
    o = Option("n", 2, "a count", between=(1, 8), sweep=(1,))
    assert o.parse("8") == 8 and o.sweep_values() == (1,)
    with pytest.raises(ConfigError, match="give n= one of: an integer from 1 to 8; default 2"):
        o.parse("9")
    b = Option("flag", False, "a switch", choices=(True, False), refused={True: "needs a GPU"})
    assert b.parse("off") is False and b.sweep_values() == ()
    with pytest.raises(ConfigError, match="flag=true cannot run here: needs a GPU"):
        b.parse("yes")
    assert resolve_options((o, b), {"n": "3"}, "x") == {"n": 3}
    assert join_spec("dcp", {"n": 3, "flag": False}, alias=True) == "dcp:n=3,flag=false"
    assert join_spec("a.b:f", {"n": 3}, alias=False) == "a.b:f[n=3]"


def test_each_adapter_declares_what_its_library_has():
    dcp = {o.name: o for o in declared_options("dcp")}
    assert {"thread_count", "sync_files", "collectives", "async", "staging"} <= set(dcp)
    assert dcp["thread_count"].default == 1 and dcp["sync_files"].default is True
    assert dcp["async"].io == "async" and dcp["async"].choices == ("thread", "process")
    assert "pinned" in dcp["staging"].refused
    meg = {o.name: o for o in declared_options("megatron")}
    assert {"fully_parallel_save", "fully_parallel_load", "persistent_queue", "save_threads"} <= set(meg)
    assert meg["fully_parallel_save"].default is False and meg["save_threads"].default == 2
    assert True in meg["persistent_queue"].refused  # the worker's torch.cuda.set_device: no GPU here
    assert declared_options("reference") == () and declared_options("broken:ignores_topology") == ()


def test_a_scenario_file_records_a_spec_with_options():
    data = {"name": "x", "topology": "tp1pp1dp2", "steps": [{"train": 1}, "save"], "backend": "dcp:sync_files=false"}
    scenario = from_dict(data, source="<x>")
    assert scenario.backend == "dcp:sync_files=false"
    assert "backend: dcp:sync_files=false" in scenario.to_yaml()
    assert from_dict({**data, "backend": "a.b:f[n=1]"}, source="<x>").backend == "a.b:f[n=1]"


@settings(max_examples=30, deadline=None)
@given(backend_specs("dcp"))
def test_drawn_specs_are_valid_and_shrink_to_the_defaults(spec):
    make_backend(spec, DCP_ASYNC)
    assert "pinned" not in spec and "cached" not in spec  # refused here: never drawn


def test_drawn_specs_shrink_to_the_backend_itself():
    assert find(backend_specs("dcp"), lambda s: True) == "dcp"
    assert (
        find(backend_specs("dcp:sync_files=false", options=["thread_count"]), lambda s: "thread_count" in s)
        == "dcp:sync_files=false,thread_count=2"
    )


@pytest.mark.multiprocess
def test_the_option_reaches_the_backend_in_the_rank_processes(tmp_path):
    """collectives=off: every rank writes its own __R.metadata and no rank the central .metadata; the
    scenario recorded in the case folder names the spec, so its replay runs the same option."""
    scenario = from_dict(
        {"name": "opts", "topology": "tp1pp1dp2", "steps": [{"train": 1}, "save", {"resume": {"continue": 1}}]},
        source="<opts>",
    )
    result = run_case(scenario, DCP_SYNC, str(tmp_path), backend="dcp:collectives=off")
    assert result.verdict == "PASS", result.detail
    step = next(os.path.join(root, d) for root, dirs, _ in os.walk(tmp_path) for d in dirs if d.startswith("step-"))
    names = set(os.listdir(step))
    assert {"__0.metadata", "__1.metadata"} <= names and ".metadata" not in names, names
    assert "backend: dcp:collectives=off" in (tmp_path / "scenario.yaml").read_text()
    assert "--backend dcp:collectives=off" in result.replay
