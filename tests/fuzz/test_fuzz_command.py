"""`resilience fuzz`: reproducible from its seed, writes the run folder, and finds and shrinks a
deliberately broken implementation within a small budget."""

import json
import os
from collections import Counter

import pytest

from resilience.checkers import PASS, Verdict
from resilience.cli import main
from resilience.fuzz import engine, speculation
from resilience.fuzz.options import FuzzOptions, replay_fuzz
from resilience.runner.run import CaseResult
from resilience.runner.scenario import load_file, load_text


def _fake_runs(monkeypatch, fail_when=None):
    """Replace the real ranks by a recorder: each case's scenario YAML, in order."""
    seen = []

    def run_case(scenario, combo, case_dir, backend=None, **kw):
        os.makedirs(case_dir, exist_ok=True)
        seen.append(f"{combo}\n{scenario.to_yaml()}")
        verdict = "FAIL" if fail_when and fail_when(scenario) else PASS
        evidence = [{"acknowledged": 2, "problem": "fake loss"}] if verdict == "FAIL" else []
        # a fault record's text starts with its kind, as the runner writes it
        faults = [
            {"fault": f"{step.fault.kind} x", "status": "fired"} for step in scenario.steps if step.kind == "crash"
        ]
        return CaseResult(
            scenario.name,
            str(combo),
            verdict,
            [Verdict("durability", verdict, "fake", evidence)],
            0.0,
            case_dir,
            "replay",
            "durability: fake",
            faults=faults,
        )

    monkeypatch.setattr(speculation, "run_case", run_case)
    return seen


def test_the_same_seed_runs_the_same_examples(tmp_path, monkeypatch):
    seen = _fake_runs(monkeypatch)
    runs = []
    for seed in (7, 7, 8):
        seen.clear()
        out = engine.fuzz(FuzzOptions(examples=15, seed=seed, max_world=4, out=str(tmp_path)))
        assert out.ok and out.seed == seed
        runs.append(list(seen))
    assert runs[0] == runs[1] and len(runs[0]) > 15
    assert runs[0] != runs[2]


def test_a_failure_is_kept_as_a_minimal_scenario_with_its_replay(tmp_path, monkeypatch):
    _fake_runs(monkeypatch, fail_when=lambda s: any(step.kind == "crash" for step in s.steps))
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    (failure,) = out.failures
    assert failure.kind == "FailInDurabilityCrash" and failure.replay.startswith("resilience run ")
    scenario = load_file(failure.scenario_file)  # the kept YAML replays as it is
    assert [s.kind for s in scenario.steps] == ["train", "save", "crash", "save"]
    assert open(failure.scenario_file).readline().startswith("# FAIL")
    for name in ("fuzz.json", "results.json", "report.md", "junit.xml", "hypothesis.log", "hypothesis"):
        assert os.path.exists(os.path.join(out.run_dir, name)), name
    report = json.load(open(os.path.join(out.run_dir, "fuzz.json")))
    assert report["failures"][0]["scenario_file"] == failure.scenario_file


def _case_files(run_dir: str) -> list[str]:
    folder = os.path.join(run_dir, "cases")
    return [open(os.path.join(folder, n)).read() for n in sorted(os.listdir(folder))]


@pytest.mark.multiprocess
def test_workers_run_the_same_examples_ahead_and_change_no_verdict(tmp_path, monkeypatch):
    _fake_runs(monkeypatch)  # forked workers inherit the fake
    runs = [
        engine.fuzz(FuzzOptions(examples=12, seed=7, out=str(tmp_path / str(w)), modes=("scenarios",), workers=w))
        for w in (1, 2)
    ]
    assert all(r.ok for r in runs) and runs[0].counts == runs[1].counts
    assert _case_files(runs[0].run_dir) == _case_files(runs[1].run_dir)  # same examples, same order, same rows
    ahead = runs[1].timings["scenarios"]["run_ahead"]
    assert ahead["taken"] == runs[1].counts["PASS"] and ahead["judged_here"] == 0, ahead
    assert "run_ahead" not in runs[0].timings["scenarios"]
    assert not os.path.exists(os.path.join(runs[1].run_dir, "work"))  # every folder judged ahead removed


@pytest.mark.multiprocess
def test_an_example_drawn_twice_is_judged_ahead_both_times(tmp_path, monkeypatch):
    # two draws can build the same scenario (Hypothesis tells choice sequences apart, not what they build)
    seen = _fake_runs(monkeypatch)
    scenario = load_file(os.path.join(os.path.dirname(__file__), "..", "..", "scenarios", "corrupt-bitflip.yaml"))
    combo = scenario.combinations[0]
    ahead = speculation.RunAhead([(scenario, combo)] * 2, 2, str(tmp_path), None)
    key = speculation.key_of(scenario, combo)
    try:
        assert all(isinstance(ahead.take(key), CaseResult) for _ in range(2))
        assert ahead.take(key) is None  # a third ask was never drawn
    finally:
        ahead.close()
    assert ahead.counts() == {"drawn": 2, "taken": 2, "judged_here": 1}
    assert seen == []  # both ran in the workers, none here


@pytest.mark.multiprocess
def test_with_workers_a_failure_shrinks_to_the_same_minimal_scenario(tmp_path, monkeypatch):
    _fake_runs(monkeypatch, fail_when=lambda s: any(step.kind == "crash" for step in s.steps))
    found = []
    for w in (1, 2):
        out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path / str(w)), modes=("scenarios",), workers=w))
        (failure,) = out.failures
        found.append(load_file(failure.scenario_file).to_yaml())  # the header names the run folder
    assert found[0] == found[1]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--faults", "rank_kill"], "would not replay exactly"),
        (["--profile", "nope"], "no Hypothesis profile 'nope'"),
        (["--backend", "broken:nope"], "no broken implementation 'nope'"),
    ],
)
def test_bad_options_are_one_clear_error(tmp_path, capsys, argv, says):
    assert main(["fuzz", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not os.listdir(tmp_path)  # nothing ran, no run folder


@pytest.mark.parametrize(
    "argv", [["--examples", "0"], ["--max-world", "65"], ["--time-budget", "-1"], ["--combos", "GLOBAL/torch/sync"]]
)
def test_bad_values_are_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(["fuzz", *argv])
    assert e.value.code == 2 and "error: argument" in capsys.readouterr().err


@pytest.mark.multiprocess
def test_the_reference_passes_a_short_run(tmp_path, capsys):
    code = main(
        [
            "fuzz",
            "--examples",
            "2",
            "--seed",
            "5",
            "--max-world",
            "2",
            "--max-steps",
            "3",
            "--faults",
            "truncate",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "seed 5" in out and "resilience fuzz --seed 5" in out and "no failure found" in out
    (run_dir,) = tmp_path.iterdir()
    report = json.loads((run_dir / "fuzz.json").read_text())
    assert report["seed"] == 5 and report["counts"].get("PASS", 0) >= 1 and not report["failures"]
    assert not (run_dir / "work").exists()  # passing cases leave no evidence behind


@pytest.mark.multiprocess
def test_a_broken_implementation_is_found_and_shrunk(tmp_path, capsys):
    # ignores_topology: the LEGACY loader takes what overlaps instead of refusing a tp or pp change (the
    # fuzzer also finds it returning wrong state for a dp2 distributed optimizer with no change at all)
    code = main(
        [
            "fuzz",
            "--backend",
            "broken:ignores_topology",
            "--combos",
            "LEGACY/torch/sync",
            "--faults",
            "--mode",
            "scenarios",
            "--examples",
            "12",
            "--seed",
            "0",  # its 12 examples move a LEGACY checkpoint across a dimension it cannot change
            "--max-world",
            "2",
            "--max-steps",
            "3",
            "--shrink-budget",
            "20",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL (scenarios" in out and "replay: resilience run " in out
    # a deterministic bug: the minimal scenario fails the same way on each of its replays, each kept
    assert "reproduced 3 of 3 replays with the same seed\n" in out, out
    (run_dir,) = tmp_path.iterdir()
    (path,) = (run_dir / "failures").glob("*.yaml")
    assert len(list((run_dir / "failures").glob("*/replay-*"))) == 3
    scenario = load_file(path)
    assert scenario.backend == "broken:ignores_topology"
    assert len(scenario.steps) <= 5 and scenario.topology.world <= 2, scenario.to_yaml()
    assert (run_dir / "hypothesis").is_dir() and any((run_dir / "hypothesis").iterdir())
    # the coverage of what it drew, read back from its cases/
    assert "\ncoverage:\n" in out and "corners never drawn:" in out
    starts = json.loads((run_dir / "coverage.json").read_text())["seen"]["iterations"]
    assert starts and all(s.startswith("start ") for s in starts), starts
    replay = next(line for line in out.splitlines() if "replay: " in line).split("replay: ", 1)[1].split()
    assert replay[:2] == ["resilience", "run"]
    capsys.readouterr()
    assert main(replay[1:] + ["--out", str(tmp_path / "replay")]) == 1  # the one-line command replays the failure
    assert "FAIL" in capsys.readouterr().out


def test_a_runner_that_raises_is_unknown_never_a_pass(tmp_path, monkeypatch):
    def run_case(scenario, combo, case_dir, backend=None, **kw):
        if any(step.kind == "corrupt" for step in scenario.steps):
            raise FileExistsError(17, "File exists")
        return CaseResult(scenario.name, str(combo), PASS, [], 0.0, case_dir, "replay")

    monkeypatch.setattr(speculation, "run_case", run_case)
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    (failure,) = out.failures
    assert failure.verdict == "UNKNOWN" and failure.kind == "UnknownInFramework" and not out.errors
    assert "the runner raised FileExistsError" in failure.detail
    assert [s.kind for s in load_file(failure.scenario_file).steps] == ["train", "save", "corrupt"]
    from tests.report.dom import parse  # the report files it under framework errors, not the implementation's

    page = parse(open(os.path.join(out.run_dir, "report.html")).read())
    articles = page.by_id("framework").find_all("article")
    assert [a.find(cls="checker").text for a in articles] == [f"framework UNKNOWN: {failure.detail}"]
    assert not page.find_all("section", id="failed")


def test_no_new_example_starts_after_the_time_budget(tmp_path, monkeypatch):
    import time

    seen = []

    def run_case(scenario, combo, case_dir, backend=None, **kw):
        time.sleep(0.05)
        seen.append(scenario)
        return CaseResult(scenario.name, str(combo), PASS, [], 0.0, case_dir, "replay")

    monkeypatch.setattr(speculation, "run_case", run_case)
    out = engine.fuzz(FuzzOptions(examples=500, seed=1, time_budget=0.6, out=str(tmp_path)))
    assert out.ok and out.stopped == {"scenarios": "time budget", "machine": "time budget"}
    assert len(seen) < 40  # a count, not a clock: 500 examples were asked for
    assert "--time-budget 0.6" in replay_fuzz(FuzzOptions(examples=5, seed=1, time_budget=0.6))


def test_damage_that_finds_nothing_to_damage_is_not_an_example(tmp_path, monkeypatch):
    # e.g. an implementation that writes no manifest.json: metadata damage cannot be carried out
    from resilience.faults import corruption

    def run_case(scenario, combo, case_dir, backend=None, **kw):
        if any(step.kind == "corrupt" for step in scenario.steps):
            corruption.metadata_damage(str(tmp_path / "nowhere"), None, None)  # raises inside corruption.py
        return CaseResult(scenario.name, str(combo), PASS, [], 0.0, case_dir, "replay")

    monkeypatch.setattr(speculation, "run_case", run_case)
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    assert out.ok and out.counts["rejected"] > 0


def test_results_hold_a_row_per_case_each_with_its_replay(tmp_path, monkeypatch):
    seen = _fake_runs(monkeypatch, fail_when=lambda s: any(step.kind == "crash" for step in s.steps))
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    rows = json.load(open(os.path.join(out.run_dir, "results.json")))
    cases = [r for r in rows if r["column"] == "scenarios"]
    assert len(cases) == len(seen) > 1  # shrinking included: every case run is a row
    assert [r["column"] for r in rows[len(cases) :]] == ["scenarios: minimal failure"]
    for r, case in zip(cases, seen):
        assert r["replay"] == f"resilience run {r['scenario_file']} --combos {r['combo']}"
        assert case.endswith(load_file(r["scenario_file"]).to_yaml())  # the kept file replays that case
    assert {r["verdict"] for r in cases} == {"PASS", "FAIL"}
    jsonl = [json.loads(line) for line in open(os.path.join(out.run_dir, "results.jsonl"))]
    assert jsonl == rows  # appended as each case ended, the minimal failure after them


def check_fuzz_page(page, run_dir: str) -> None:
    from tests.report.test_content import check_links

    """The fuzz report accounts for every case run (by mode, by verdict, shrinking included) and writes out
    the minimal failure: its evidence, its scenario and its replay; the failing cases met on the way to it
    are counted and listed, not each written out. Read from the DOM, as written or as a browser built it."""
    rows = json.load(open(os.path.join(run_dir, "results.json")))
    cases = [r for r in rows if r["column"] == "scenarios"]
    failing = sum(r["verdict"] == "FAIL" for r in cases)
    (minimal,) = [r for r in rows if r.get("minimal")]
    assert (
        page.by_id("headline").text
        == f"{len(cases) - failing} passed, {failing} not passed ({failing} FAIL); 1 minimal failure kept"
    )
    counts = {
        li.attrs.get("data-verdict", "cases"): int(li.find(cls="n").text) for li in page.by_id("counts").find_all("li")
    }
    assert counts == {"cases": len(cases), "PASS": len(cases) - failing, "FAIL": failing, "minimal failure": 1}
    (mode,) = page.by_id("fuzz-modes").find("tbody").find_all("tr")
    cells = [td.text for td in mode.find_all("td")]
    searching, shrinking = sum(r["phase"] == "searching" for r in cases), sum(r["phase"] == "shrinking" for r in cases)
    assert cells[:5] == [
        "scenarios",
        str(len(cases)),
        str(searching),
        str(shrinking),
        f"{len(cases) - failing} PASS {failing} FAIL ",
    ]
    assert searching + shrinking == len(cases) and searching >= 1 and shrinking >= 1  # it found, then shrank
    seconds, running, generating, shrinking_s = map(float, cells[5:9])
    assert abs(running + generating - seconds) <= 0.11 and shrinking_s <= seconds  # the time adds up
    accounting = page.by_id("accounting").text
    assert f"scenarios: {len(cases)} cases run ({searching} searching + {shrinking} shrinking)." in accounting
    # the faults drawn: the Hypothesis events each case gave, kept on its row, by kind and verdict
    for r in cases:
        kinds = list(dict.fromkeys(s.fault.kind for s in load_file(r["scenario_file"]).steps if s.fault))
        assert r["events"] == [f"fault: {k}" for k in kinds] + [f"verdict: {r['verdict']}"]
    told = json.load(open(os.path.join(run_dir, "fuzz.json")))["events"]["scenarios"]
    assert told == dict(Counter(e for r in cases for e in r["events"]))  # what Hypothesis was told, no more
    drawn = {
        tr.attrs["data-fault"]: [td.text for td in tr.find_all("td")]
        for tr in page.by_id("faults-drawn").find_all("tr", **{"data-mode": "scenarios"})
    }
    for kind, (_, shown, n, fired, verdicts, rejected) in drawn.items():
        rows_of = [
            r for r in cases if (f"fault: {kind}" in r["events"]) or (kind == "no fault" and len(r["events"]) == 1)
        ]
        assert int(n) == len(rows_of) > 0 and shown == kind and rejected == ""
        expected = Counter(r["verdict"] for r in rows_of)
        assert verdicts == "".join(f"{expected[v]} {v} " for v in ("PASS", "FAIL") if expected[v])
        if kind == "rank_crash":  # the fake fires every crash, and fails every case that drew one
            assert fired == n and expected == {"FAIL": len(rows_of)}
    assert sum(int(cells[2]) for k, cells in drawn.items() if k == "no fault") == sum(
        len(r["events"]) == 1 for r in cases
    )
    assert "Hypothesis' own count for scenarios: generate phase: " in page.by_id("fuzz").find(cls="hypothesis").text
    (article,) = page.by_id("failed").find_all("article")
    assert article.find("h3").text == f"FAIL {minimal['combo']} · scenarios: minimal failure"
    assert [dd.text for dd in article.find("dl", cls="evidence").find_all("dd")] == ["2", "fake loss"]
    assert article.find("pre", cls="scenario").text == open(minimal["scenario_file"]).read()
    assert article.find(cls="replay").find("pre").text == minimal["replay"]
    assert (
        f"stands for the {failing} failing cases met while searching and shrinking"
        in page.by_id("failed").find(cls="on-the-way").text
    )
    listed = page.by_id("cases").find("tbody").find_all("tr")
    assert len(listed) == len(rows)  # every case run, and the minimal failure
    heads = [th.text for th in page.by_id("cases").find("thead").find_all("th")]
    assert heads == ["#", "combination", "column", "phase", "faults drawn", "verdict", "why", "seconds", "files"]
    for tr, r in zip(listed, rows):
        cells = {h: td for h, td in zip(heads, tr.find_all("td"))}
        assert cells["phase"].text == r.get("phase", "")
        assert r.get("minimal") or cells["faults drawn"].text == ", ".join(
            e[len("fault: ") :] for e in r.get("events", []) if e.startswith("fault: ")
        )
        if r["verdict"] == "FAIL" and not r.get("minimal"):  # met on the way, not written out: why, on its line
            assert cells["why"].text == r["detail"] and not cells["#"].find_all("a")
    # the matrix cell of the mode's failing cases leads to the section holding the minimal failure
    cell = page.find("table", cls="matrix").find("tbody").find_all("td")[0]
    assert cell.find("a").attrs["href"] == "#failed"
    check_links(page, run_dir)


def test_the_fuzz_report_accounts_for_every_case_and_writes_out_the_minimal_failure(tmp_path, monkeypatch):
    from tests.report.dom import parse

    _fake_runs(monkeypatch, fail_when=lambda s: any(step.kind == "crash" for step in s.steps))
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    check_fuzz_page(parse(open(os.path.join(out.run_dir, "report.html")).read()), out.run_dir)
    before = open(os.path.join(out.run_dir, "report.md")).read()
    assert main(["report", out.run_dir]) == 1  # rebuilt from results.jsonl: the same report
    assert open(os.path.join(out.run_dir, "report.md")).read() == before


def test_the_time_budget_stops_a_huge_example_count(tmp_path):
    """Generation itself stops: a subprocess with a bound, not a timing assertion."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "resilience.cli",
            "fuzz",
            "--examples",
            "9" * 23,
            "--time-budget",
            "1",
            "--mode",
            "scenarios",
            "--max-world",
            "1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "scenarios: stopped when its time budget was spent" in proc.stdout


@pytest.mark.multiprocess
def test_unprobed_cases_are_not_passed(tmp_path, capsys):
    # the in-house library writes with plain open(): through the seam alone a generated io_error never reaches
    # it, and the case is UNPROBED
    code = main(
        [
            "fuzz",
            "--backend",
            "tests.backends.inhouse:factory",
            "--combos",
            "LOCAL/torch/sync",
            "--io",
            "seam",
            "--faults",
            "io_error",
            "--mode",
            "scenarios",
            "--examples",
            "4",
            "--seed",
            "2",
            "--max-world",
            "1",
            "--max-steps",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "no failure found" not in out
    assert " not passed (" in out and " UNPROBED)" in out and " UNPROBED: a generated fault never fired" in out
    assert "gaps in the search (UNPROBED, not shrunk): io_error: never fired x" in out  # each gap with its reason


def test_progress_shows_each_modes_own_phase(tmp_path, monkeypatch, capsys):
    """Once the scenarios mode has shrunk its failure, the machine mode's cases are not counted as its
    shrinking: the plain progress lines (stderr is not a terminal here) name the phase of the mode running."""
    _fake_runs(monkeypatch, fail_when=lambda s: any(step.kind == "crash" for step in s.steps))
    assert main(["fuzz", "--examples", "30", "--seed", "3", "--out", str(tmp_path)]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("progress: ")]
    assert any(ln.startswith("progress: scenarios: shrinking · ") for ln in lines)
    machine = [ln for ln in lines if ln.endswith(("machine PASS", "machine FAIL"))]
    assert machine and not any("scenarios: shrinking" in ln for ln in machine)


def test_precision_changes_reach_both_modes_and_the_replay(tmp_path, monkeypatch):
    from resilience.fuzz import engine

    seen = []

    def run_case(scenario, combo, case_dir, backend=None, **kw):
        seen.append(scenario)
        return CaseResult(scenario.name, str(combo), PASS, [], 0.0, case_dir, "replay")

    monkeypatch.setattr(speculation, "run_case", run_case)
    opts = FuzzOptions(examples=25, seed=3, max_world=1, faults=[], precision_changes=True, out=str(tmp_path))
    assert engine.fuzz(opts).ok
    changed = {s.name for s in seen for st in s.steps if st.kind == "resume" and "precision" in st.args}
    assert changed == {"fuzz-scenario", "fuzz-machine"}, changed
    assert replay_fuzz(opts).endswith("--precision-changes")


def test_without_combos_the_fuzzer_draws_only_what_the_backend_declares(tmp_path, monkeypatch, capsys):
    """A backend that declares its combinations (here LOCAL/torch/sync only) is fuzzed on those by default,
    not refused for the first of all six."""
    seen = _fake_runs(monkeypatch)
    argv = ["fuzz", "--backend", "tests.backends.inhouse:factory", "--examples", "4", "--seed", "1"]
    main([*argv, "--mode", "scenarios", "--workers", "1", "--out", str(tmp_path)])
    assert seen and {case.split("\n", 1)[0] for case in seen} == {"LOCAL/torch/sync"}


def test_a_minimal_failure_that_does_not_always_come_back_counts_its_reproductions(tmp_path, monkeypatch):
    from resilience.checkers import FAIL
    from resilience.fuzz import outcome
    from resilience.fuzz.judge import failure_class
    from resilience.runner import run as run_module

    def result(verdict):
        return CaseResult("s", "LEGACY/torch/sync", verdict, [Verdict("durability", verdict, "x")], 0.0, "", "")

    first = result(FAIL)
    outcomes = iter([FAIL, PASS, FAIL])  # the replays: the failure came back twice of three times
    monkeypatch.setattr(run_module, "run_case", lambda *a, **k: result(next(outcomes)))
    scenario = load_text("name: s\ncombinations: [LEGACY/torch/sync]\nsteps: [save]\n")
    assert outcome.replayed(scenario, first, failure_class(first).__name__, str(tmp_path), None) == 2
