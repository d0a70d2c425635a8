"""The pytest plugin, tested with pytester: options and their errors, scenario files as items,
the fixtures, xdist and JUnit. Runs that start ranks go through a subprocess."""

import textwrap
import xml.etree.ElementTree as ET

import pytest

import resilience.runner.scenario  # noqa: F401  (torch once, out here: in-process runs must not import it afresh)

pytest_plugins = ["pytester"]

MODEL = "model: {num_layers: 1, hidden: 2, ffn_hidden: 2, heads: 1, vocab: 4}"
PASSING = f"""
name: save-resume
topology: tp1pp1dp2
{MODEL}
combinations: [LEGACY/torch/sync, GLOBAL/torch_dist/sync]
steps:
  - train: 1
  - save
  - resume: {{continue: 1}}
"""
# the minimal failure `resilience fuzz` finds for a loader that skips checksums
FAILING = """
name: flipped-bit
topology: tp1pp1dp1
model: {num_layers: 1, hidden: 1, ffn_hidden: 1, heads: 1, vocab: 1, make_vocab_size_divisible_by: 1}
combinations: [LEGACY/torch/sync]
backend: broken:no_checksum
steps:
  - train: 1
  - save
  - corrupt: {kind: bitflip, rank: 0, seed: 1}
"""


@pytest.mark.parametrize(
    "option, says",
    [
        ("--resilience-max-world=0", "--resilience-max-world: must be between 1 and 64, got 0"),
        ("--resilience-max-world=two", "must be a whole number of ranks, got 'two'"),
        ("--resilience-combos=GLOBAL/torch/sync", "torch cannot carry GLOBAL semantics"),
        ("--resilience-combos=,", "--resilience-combos: empty"),
        ("--resilience-backend=broken:nope", "no broken implementation 'nope'"),
        ("--resilience-backend=not a backend", "cannot read 'not a backend'"),
        ("--resilience-backend=no_such_module:factory", "cannot import 'no_such_module:factory'"),
        ("--resilience-profile=nope", "no Hypothesis profile 'nope'"),
        ("--resilience-storage=s3://No_Bucket", "--resilience-storage: bucket name 'No_Bucket'"),
        ("--resilience-storage=nfs", "--resilience-storage: unknown storage 'nfs'"),
    ],
)
def test_bad_option_values_are_usage_errors(pytester, option, says):
    result = pytester.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str()


def test_options_are_in_one_group(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "checkpoint resilience (resilience.pytest_plugin):",
            "*--resilience-combos=*",
            "*--resilience-max-world=W*",
            "*--resilience-backend=NAME*",
            "*--resilience-profile=NAME*",
            "*--resilience-out=DIR*",
        ]
    )


def test_every_fixture_of_the_plugin_shows_in_pytest_fixtures_with_its_docstring(pytester):
    """`pytest --fixtures` is where a user looks: every fixture the plugin defines is listed there, with
    the first line of its docstring (resilience_combo too, though parametrize supplies its values)."""
    import importlib
    import inspect
    import pkgutil
    import re

    import resilience.pytest_plugin as plugin

    defined = []  # in every module of the plugin: one left out of the plugin's own namespace is caught below
    for info in pkgutil.iter_modules(plugin.__path__):
        module = importlib.import_module(f"{plugin.__name__}.{info.name}")
        defined += re.findall(r"@pytest\.fixture[^\n]*\ndef (\w+)", inspect.getsource(module))
    assert "resilience_combo" in defined and len(defined) >= 6, defined
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest("--fixtures")
    lines = result.stdout.str().splitlines()
    for name in defined:
        at = next((i for i, line in enumerate(lines) if line.startswith(f"{name} [")), None)
        assert at is not None, f"{name} is not listed by pytest --fixtures"
        doc = lines[at + 1].strip()
        assert doc and "no docstring" not in doc, (name, doc)
    listed = [line.split(" [")[0] for line in lines if line.startswith("resilience_")]
    assert sorted(listed) == sorted(defined)


def test_scenario_files_are_items_per_combination(pytester):
    pytester.makefile(".yaml", **{"scenarios/save_resume": PASSING})
    result = pytester.runpytest("scenarios", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "scenarios/save_resume.yaml::save-resume[[]LEGACY-torch-sync[]]",
            "scenarios/save_resume.yaml::save-resume[[]GLOBAL-torch_dist-sync[]]",
            "2 tests collected*",
        ]
    )
    result = pytester.runpytest("scenarios", "--collect-only", "-q", "--resilience-combos=GLOBAL/torch_dist/sync")
    result.stdout.fnmatch_lines(["*save-resume[[]GLOBAL-torch_dist-sync[]]", "1 test collected*"])
    assert "LEGACY" not in result.stdout.str()


def test_only_scenario_folders_and_named_files_are_collected(pytester):
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.makefile(
        ".yaml", **{"tests/scenarios/data": PASSING, "tests/ci": "steps: [deploy]\n", "elsewhere/one": PASSING}
    )
    pytester.makepyfile(**{"tests/test_a": "def test_a():\n    pass\n"})
    result = pytester.runpytest("--collect-only", "-q")  # testpaths: YAML test data is left alone
    result.stdout.fnmatch_lines(["tests/test_a.py::test_a", "1 test collected*"])
    result = pytester.runpytest("elsewhere/one.yaml", "--collect-only", "-q")  # named on the command line
    result.stdout.fnmatch_lines(["*one.yaml::save-resume[[]LEGACY-torch-sync[]]", "2 tests collected*"])


def test_a_bad_scenario_file_is_one_clear_collection_error(pytester):
    pytester.makefile(".yaml", **{"scenarios/bad": "steps:\n  - train: 1\n  - train: two\n"})
    result = pytester.runpytest("scenarios")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting scenarios/bad.yaml*", "*bad.yaml:3: steps.1.train*"])
    assert "Traceback" not in result.stdout.str()


def test_scenarios_fixtures_xdist_and_junit(pytester):
    pytester.makefile(
        ".yaml",
        **{
            "scenarios/save_resume": PASSING,
            "scenarios/flipped_bit": FAILING,
            "scenarios/wide": PASSING.replace("tp1pp1dp2", "tp1pp1dp4").replace("save-resume", "wide"),
        },
    )
    pytester.makepyfile(
        test_fixtures=textwrap.dedent("""
        import pytest
        from hypothesis import given, settings

        import resilience.strategies as rst


        def rank_sum(ctx, x):
            return ctx.rank + x


        def test_launcher(resilience_launcher):
            assert resilience_launcher(rank_sum, 2, args=(10,)) == [10, 11]


        def test_launcher_respects_max_world(resilience_launcher):
            resilience_launcher(rank_sum, 4, args=(0,))


        def test_combo_and_backend(resilience_combo, resilience_backend):
            assert resilience_backend.name == "reference"
            assert str(resilience_combo) == "LEGACY/torch/sync"
            assert resilience_backend.make(resilience_combo).combo == resilience_combo


        def test_run_fixture(resilience_run, resilience_run_dir):
            (result,) = resilience_run("scenarios/save_resume.yaml")  # a path, or a Scenario
            assert result.verdict == "PASS" and result.case_dir.startswith(resilience_run_dir)


        @settings(max_examples=2, deadline=None)
        @given(rst.scenarios(max_world=2, max_steps=2, faults=["truncate"], moves=False))
        def test_property(resilience_run, scenario):
            resilience_run(scenario, combos=["LEGACY/torch/sync"])


        def test_profile_is_loaded():
            assert settings().max_examples == 50  # --resilience-profile=dev
        """)
    )
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "scenarios",
        "test_fixtures.py",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        "--resilience-combos=LEGACY/torch/sync",
        "--resilience-max-world=2",
        "--resilience-profile=dev",
        "-rs",
    )
    result.assert_outcomes(passed=6, failed=1, skipped=2)
    out = result.stdout.str()
    assert "FAIL: scenario 'flipped-bit' with LEGACY/torch/sync" in out
    assert (
        "replay: resilience run scenarios/flipped_bit.yaml --combos LEGACY/torch/sync --backend broken:no_checksum"
        in out.replace(str(pytester.path) + "/", "")
    )
    assert "integrity" in out and "returned wrong values" in out
    assert "needs 4 ranks; --resilience-max-world is 2" in out
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    failed = cases["flipped-bit[LEGACY-torch-sync]"]
    assert failed.find("failure") is not None and "replay: resilience run" in failed.find("failure").text
    props = {p.get("name"): p.get("value") for p in failed.iter("property")}
    assert props["verdict"] == "FAIL" and props["replay"].startswith("resilience run ")


# a crash at byte 300 of rank 0's data file of the second save, on a library that writes with plain torch.save
CRASH_IN_INHOUSE = """
name: crash-in-torch-save
topology: tp1pp1dp1
model: {num_layers: 1, hidden: 2, ffn_hidden: 2, heads: 1, vocab: 4}
combinations: [LOCAL/torch/sync]
backend: tests.backends.inhouse:factory
steps: [{train: 1}, save, {train: 1}, {crash: {rank: 0, after_bytes: 300, file: "@data"}}, save, resume]
"""


@pytest.mark.multiprocess
def test_resilience_io_picks_the_way_faults_reach_the_backend(pytester, fuse, monkeypatch):
    """The same scenario item through the seam (the fault cannot reach torch.save: UNPROBED, a failed item)
    and through the fault-injecting file system (it fires; the item passes)."""
    import os

    pytester.makefile(".yaml", **{"scenarios/crash": CRASH_IN_INHOUSE})
    env_path = os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(os.path.dirname(__file__))), os.environ.get("PYTHONPATH")) if p
    )
    monkeypatch.setenv("PYTHONPATH", env_path)  # tests.backends.inhouse, from this repository
    seam = pytester.runpytest_subprocess("scenarios", "-p", "no:cacheprovider", "-n", "0", "--resilience-io=seam")
    seam.assert_outcomes(failed=1)
    assert "UNPROBED" in seam.stdout.str()
    fuse_run = pytester.runpytest_subprocess("scenarios", "-p", "no:cacheprovider", "-n", "0")
    fuse_run.assert_outcomes(passed=1)


def test_the_session_report_names_each_case_test_and_says_which_are_expected_to_fail(pytester):
    """In process, with run_case replaced by a FAIL (no ranks): a test marked xfail fails as expected, and the
    session's report says so beside its FAIL instead of counting it as one more surprise."""
    import json
    import os

    from tests.report.dom import parse

    pytester.makefile(".yaml", flipped=FAILING)
    pytester.makeconftest(
        """
        import pytest

        import resilience.runner.run as run
        from resilience.checkers import Verdict

        def failing(scenario, combo, case_dir, **kw):
            evidence = [{"problem": "a flipped bit loaded as wrong values"}]
            verdicts = [Verdict("integrity", "FAIL", "wrong values", evidence)]
            return run.CaseResult(scenario.name, str(combo), "FAIL", verdicts, 0.0, case_dir, "replay", "wrong")

        @pytest.fixture(autouse=True)
        def _failing(monkeypatch):  # undone after the test: this session runs inside the outer one's worker
            monkeypatch.setattr(run, "run_case", failing)
        """
    )
    pytester.makepyfile(
        test_gap="""
        import pytest

        @pytest.mark.xfail(reason="known gap: no checksum", strict=True)
        def test_gap(resilience_run):
            resilience_run("flipped.yaml")
        """
    )
    out = pytester.path / "runs"
    result = pytester.runpytest("test_gap.py", "-p", "no:cacheprovider", f"--resilience-out={out}")
    result.assert_outcomes(xfailed=1)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    (row,) = json.loads((run_dir / "results.json").read_text())
    assert row["test"] == "test_gap.py::test_gap" and row["expected_failure"] == "known gap: no checksum"
    page = parse((run_dir / "report.html").read_text())
    assert page.by_id("headline").text == (
        "0 passed, 1 not passed (1 FAIL); 1 of the 1 not passed is expected to fail (their tests are marked xfail)"
    )
    case = page.by_id("case-1")
    assert case.find(cls="xfail").text == "Expected to fail: its test is marked xfail (known gap: no checksum)."
    assert case.find(cls="test").text == "test: test_gap.py::test_gap"
    command = dict(zip((dt.text for dt in page.find_all("dt")), (dd.text for dd in page.find_all("dd"))))["command"]
    assert command.startswith(f"pytest test_gap.py -p no:cacheprovider --resilience-out={out}")  # as it was run
    assert os.path.exists(run_dir / "report.md")
