import pytest

from resilience.runner.scenario import ScenarioError, load_file, load_text

GOOD = """
name: good
topology: tp2pp1dp1
combinations: [LEGACY/torch/sync, GLOBAL/torch_dist/async]
steps:
  - train: 2
  - save
  - resume: {topology: tp1pp1dp2, continue: 1}
expect: {loaded_iteration: 2}
"""


def test_a_good_scenario_loads_and_round_trips():
    s = load_text(GOOD, "good.yaml")
    assert [st.kind for st in s.steps] == ["train", "save", "resume"]
    assert [str(c) for c in s.combinations] == ["LEGACY/torch/sync", "GLOBAL/torch_dist/async"]
    again = load_text(s.to_yaml(), "again.yaml")
    assert again.to_dict() == s.to_dict()


@pytest.mark.parametrize(
    "text, where, field",
    [
        ("steps:\n  - train: 2\n  - sav\n", "x.yaml:3", "steps.1"),
        ("steps:\n  - train: 0\n", "x.yaml:2", "steps.0.train"),
        ("topology: tp3pp1dp1\nsteps:\n  - save\n", "x.yaml:1", "topology"),
        ("combinations: [GLOBAL/torch/sync]\nsteps:\n  - save\n", "x.yaml:1", "combinations.0"),
        ("stepz:\n  - save\n", "x.yaml:1", "stepz"),
        ("model: {hidden: 30}\nsteps:\n  - save\n", "x.yaml:1", "model.hidden"),
        ("steps:\n  - resume: {topology: tp9}\n", "x.yaml:2", "steps.0.resume.topology"),
        ("steps: [train: 2\n", "x.yaml:2", "yaml"),
    ],
)
def test_a_bad_scenario_names_file_line_and_field(text, where, field):
    with pytest.raises(ScenarioError) as e:
        load_text(text, "x.yaml")
    assert e.value.problems[0].text("x.yaml").startswith(f"{where}: {field}"), str(e.value)


def test_unknown_step_lists_what_is_allowed():
    with pytest.raises(ScenarioError, match="allowed: train, save"):
        load_text("steps:\n  - explode\n", "x.yaml")


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ScenarioError, match="does not exist"):
        load_file(tmp_path / "nope.yaml")


def test_shipped_scenarios_all_validate():
    from pathlib import Path

    files = sorted((Path(__file__).parents[2] / "scenarios").glob("*.yaml"))
    assert len(files) >= 40, files  # an empty or moved folder must not pass as "all valid"
    tags = set()
    for f in files:
        s = load_file(f)
        tags |= set(s.tags)
        # a case folder keeps the scenario as to_yaml() wrote it, and its replay command reads that file
        assert load_text(s.to_yaml(), f"{f.name} again").to_dict() == s.to_dict()
    # every category of fault the library ships stays covered by at least one scenario
    assert {"basics", "corruption", "crash", "io", "nemesis", "power-loss", "topology", "async", "fast"} <= tags


def _problems(text: str) -> list[tuple]:
    with pytest.raises(ScenarioError) as e:
        load_text(text, "x.yaml")
    return [(p.line, p.field) for p in e.value.problems]


def test_every_problem_of_a_file_is_reported_sorted_by_line():
    text = (
        "timeout: .inf\n"  # 1
        "tags: abc\n"  # 2
        "steps:\n"
        "  - train: 0\n"  # 4
        "  - resume: {dtype: bf16}\n"  # 5
        "  - save: {now: true}\n"  # 6
        "expect: {foo: 1}\n"  # 7
        "model: {lr: .nan, hiden: 8}\n"
    )  # 8
    assert _problems(text) == [
        (1, "timeout"),
        (2, "tags"),
        (4, "steps.0.train"),
        (5, "steps.1.resume.dtype"),
        (6, "steps.2.save.now"),
        (7, "expect.foo"),
        (8, "model.hiden"),
        (8, "model.lr"),
    ]
    with pytest.raises(ScenarioError) as e:
        load_text(text, "x.yaml")
    assert str(e.value).startswith("x.yaml: 8 problems:\n  x.yaml:1: timeout: ")


@pytest.mark.parametrize(
    "step, field, allowed",
    [
        ("resume: {dtype: bf16}", "steps.0.resume.dtype", "allowed: continue, precision, stagger, topology"),
        ("crash: {rank: 0, phase: write, bytes: 5}", "steps.0.crash.bytes", "after_bytes"),
        ("kill: {rank: 0, after: 1, wen: 2}", "steps.0.kill.wen", "when"),
        ("corrupt: {kind: truncate, lenght: 0}", "steps.0.corrupt.lenght", "length"),
        ("fault: {kind: io_error, errno: EIO, nht: 2}", "steps.0.fault.nht", "nth"),
        ("lose_unsynced: {max_state: 2}", "steps.0.lose_unsynced.max_state", "max_states"),
        ("finalize: {x: 1}", "steps.0.finalize.x", "takes no options"),
        ("verify: {x: 1}", "steps.0.verify.x", "takes no options"),
    ],
)
def test_every_step_mapping_refuses_unknown_keys_and_names_the_allowed(step, field, allowed):
    with pytest.raises(ScenarioError) as e:
        load_text(f"steps:\n  - train: 1\n  - save\n  - {step}\n", "x.yaml")
    [p] = e.value.problems
    assert p.line == 4 and p.field == field.replace("steps.0", "steps.2") and allowed in p.allowed, str(e.value)


def test_kill_accepts_the_when_mapping_its_help_names():
    s = load_text(
        "topology: tp2pp1dp1\nsteps:\n  - train: 1\n  - kill: {rank: 1, when: {after: 0.5}}\n  - save\n"
        "  - kill: {when: {file: '*.pt', size: 64}}\n  - save\n",
        "x.yaml",
    )
    first, second = (st.fault for st in s.steps if st.kind == "kill")
    assert first.trigger.after == 0.5 and first.target.rank == 1
    assert second.trigger.size == 64 and second.target.path == "*.pt"
    assert "when" in __import__("resilience.runner.scenario_schema", fromlist=["STEP_KINDS"]).STEP_KINDS["kill"]
    assert load_text(s.to_yaml(), "again.yaml").to_dict() == s.to_dict()
    assert _problems("steps:\n  - kill: {rank: 0, when: after}\n") == [(2, "steps.0.kill.when")]


def test_fault_ranks_must_exist_in_the_job_they_strike():
    assert _problems("topology: tp2pp1dp1\nsteps:\n  - crash: {rank: 2, phase: write}\n  - save\n") == [
        (3, "steps.0.crash.rank")
    ]
    # after a resume onto four ranks, rank 3 exists
    load_text(
        "topology: tp2pp1dp1\nsteps:\n  - save\n  - resume: {topology: tp2pp1dp2, continue: 0}\n"
        "  - crash: {rank: 3, phase: write}\n  - save\n",
        "x.yaml",
    )


@pytest.mark.parametrize(
    "text, field",
    [
        ("name: ../../x\n", "name"),
        ("name: a/b\n", "name"),
        ("name: .hidden\n", "name"),
        ("name: 5\n", "name"),
        (f"name: {'a' * 81}\n", "name"),
        ("seed: -7\n", "seed"),
        ("seed: 9223372036854775808\n", "seed"),
        ("seed: 1.5\n", "seed"),
        ("seed: true\n", "seed"),
        ("timeout: .nan\n", "timeout"),
        ("timeout: 3601\n", "timeout"),
        ("timeout: 0\n", "timeout"),
        ("tags: [5]\n", "tags.0"),
        ("tags: ['a b']\n", "tags.0"),
        ("tags: abc\n", "tags"),
        ("backend: 'os.system; rm'\n", "backend"),
        ("description: [1]\n", "description"),
        ("model: {lr: .inf}\n", "model.lr"),
        ("model: {lr: abc}\n", "model.lr"),
        ("model: {seed: -1}\n", "model.seed"),
        ("model: {num_layers: 1025}\n", "model.num_layers"),
        ("model: {hidden: 1048576, heads: 1, ffn_hidden: 4194304}\n", "model"),
        ("expect: {loaded_iteration: -1}\n", "expect.loaded_iteration"),
        ("expect: {outcome: maybe}\n", "expect.outcome"),
        ("combinations: [5]\n", "combinations.0"),
    ],
)
def test_values_are_checked_for_type_and_range(text, field):
    problems = _problems(text + "steps:\n  - train: 1\n  - save\n")
    assert [f for _, f in problems] == [field], problems


@pytest.mark.parametrize(
    "step, field",
    [
        ("train: 10001", "steps.0.train"),
        ("train: 100000000", "steps.0.train"),
        ("resume: {continue: 10001}", "steps.0.resume.continue"),
        ("resume: {stagger: 10.5}", "steps.0.resume.stagger"),
        ("resume: {stagger: .nan}", "steps.0.resume.stagger"),
        ("fault: {kind: slow_write, delay: 3601}", "steps.0.fault.delay"),
        ("kill: {rank: 0, after: 1.0e+300}", "steps.0.kill.after"),
        ("lose_unsynced: {max_states: 1025}", "steps.0.lose_unsynced.max_states"),
        ("corrupt: {kind: extra, length: 1000000000}", "steps.0.corrupt.length"),
        ("corrupt: {kind: delete, file: ../../etc/passwd}", "steps.0.corrupt.file"),
        ("kill: {rank: 0, file: /tmp/x, size: 1}", "steps.0.kill.file"),
    ],
)
def test_step_values_have_ceilings(step, field):
    assert [f for _, f in _problems(f"steps:\n  - {step}\n")] == [field]


def test_values_at_the_ceilings_load():
    s = load_text(
        f"name: a.b_c-1\nseed: {2**63 - 1}\ntimeout: 3600\ntags: [fast, 'x:y']\nsteps:\n"
        "  - train: 10000\n  - save\n  - resume: {continue: 10000, stagger: 10}\n",
        "x.yaml",
    )
    assert s.seed == 2**63 - 1 and s.timeout == 3600.0 and s.steps[0].args == {"steps": 10000}


def test_a_model_too_large_for_memory_is_refused_before_any_rank(monkeypatch):
    import resilience.state.limits as limits

    text = "model: {hidden: 256, heads: 4, ffn_hidden: 512}\ntopology: tp1pp1dp2\nsteps:\n  - train: 1\n"
    load_text(text, "x.yaml")
    monkeypatch.setattr(limits, "memory_ceiling", lambda: 10 << 20)  # 10 MiB
    with pytest.raises(ScenarioError, match="model: needs about .* more than the ceiling of 10 MiB"):
        load_text(text, "x.yaml")


def test_a_name_comes_from_the_file_made_safe(tmp_path):
    f = tmp_path / "my scenario..v2!.yaml"
    f.write_text("steps:\n  - train: 1\n")
    assert load_file(f).name == "my-scenario.v2"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        load_file(fifo)


def test_the_matrix_seed_moves_the_damage_too():
    from resilience.runner.matrix import fault_scenario

    (step,) = [s for s in fault_scenario("bitflip", 7).steps if s.kind == "corrupt"]
    assert step.args["seed"] == 7


def test_a_resume_may_change_precision_once_every_save_is_done():
    s = load_text(
        "model: {dtype: bf16}\nsteps:\n  - train: 1\n  - save\n  - resume: {precision: fp32}\n"
        "  - resume: {precision: bf16, continue: 0}\n",
        "x.yaml",
    )
    assert [st.args.get("precision") for st in s.steps if st.kind == "resume"] == ["fp32", "bf16"]
    assert load_text(s.to_yaml(), "again.yaml").to_dict() == s.to_dict()
    assert _problems("steps:\n  - save\n  - resume: {precision: fp16}\n") == [(3, "steps.1.resume.precision")]
    # what a later load must give is known for saves in the model's dtype only
    problems = _problems("steps:\n  - save\n  - resume: {precision: bf16}\n  - train: 1\n  - save\n")
    assert problems == [(5, "steps.3")]
    # a resume in the model's own dtype changes nothing: saves may follow
    load_text("steps:\n  - save\n  - resume: {precision: fp32}\n  - save\n", "x.yaml")


def test_damage_at_rest_after_a_resume_may_target_a_rank_that_wrote_files():
    """After a resume on fewer ranks, the checkpoint on disk still has the saving job's ranks' files: a
    corruption may target them, a fault in the running job may not."""
    head = "name: x\ntopology: tp2pp1dp1\nsteps:\n  - save\n  - resume: {topology: tp1pp1dp1}\n"
    scenario = load_text(head + "  - corrupt: {kind: truncate, rank: 1}\n")
    assert scenario.steps[-1].fault.target.rank == 1
    with pytest.raises(ScenarioError, match="out of range"):
        load_text(head + "  - crash: {rank: 1}\n")


def test_a_resume_may_change_the_optimizer_states_precision():
    s = load_text(
        "model: {optim_dtype: bf16}\nsteps:\n  - save\n  - resume: {precision: fp32}\n"
        "  - resume: {precision: fp32+optim_bf16, continue: 0}\n",
        "x.yaml",
    )
    assert s.model.precision.optim == "bf16"
    assert [st.args.get("precision") for st in s.steps if st.kind == "resume"] == ["fp32", "fp32+optim_bf16"]
    with pytest.raises(ScenarioError) as e:
        load_text("steps:\n  - save\n  - resume: {precision: fp32+optim-bf16}\n", "x.yaml")
    assert "x.yaml:3: steps.1.resume.precision: cannot read precision 'fp32+optim-bf16'" in str(e.value)
    assert "PARAMS+optim_OPTIM" in str(e.value)
    # the model's own precision spelt out changes nothing: saves may follow
    load_text("steps:\n  - save\n  - resume: {precision: fp32+optim_fp32}\n  - save\n", "x.yaml")
    problems = _problems("steps:\n  - save\n  - resume: {precision: fp32+optim_bf16}\n  - save\n")
    assert problems == [(4, "steps.2")]


def test_padding_values_with_a_resume_on_another_tp_is_refused_with_the_fix():
    from resilience.runner.scenario import ScenarioError, load_text

    text = "topology: tp2pp1dp1\nmodel: {padding_values: true}\nsteps: [save, {resume: {topology: tp1pp1dp2}}]\n"
    with pytest.raises(ScenarioError, match=r"<scenario>:3: steps.1.resume.topology: model.padding_values pads"):
        load_text(text)
    load_text(text.replace("tp1pp1dp2", "tp2pp1dp2"))  # the same tp: fine


def test_one_corrupt_step_may_list_several_damages_each_checked_on_its_own_line():
    text = (
        "topology: tp1pp1dp1\n"
        "steps:\n"
        "  - save\n"
        "  - corrupt:\n"
        "      - {kind: metadata, how: garble}\n"  # 5
        "      - {kind: bitflip}\n"  # 6
        "  - resume: {}\n"
    )
    steps = load_text(text).steps
    assert [(s.kind, s.args.get("kind")) for s in steps[1:3]] == [("corrupt", "metadata"), ("corrupt", "bitflip")]
    assert _problems(text.replace("{kind: bitflip}", "{kind: nope}")) == [(6, "steps.1.corrupt.1.kind")]
    assert [f for _, f in _problems("steps: [save, {corrupt: []}]\n")] == ["steps.1.corrupt"]
