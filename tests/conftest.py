import os
import shutil
import subprocess

import psutil
import pytest
from hypothesis import settings

import resilience.fuzz.profiles  # noqa: F401  (registers ci / dev / fuzz, as the pytest plugin does)
from resilience.fusefs import FSNAME, fuse_available, fuse_mounts

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def no_leftover_processes(tmp_path):
    """Every test ends with no rank process of ours still alive, and none of our mounts under its folder."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    alive = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"
    mounts = [mp for source, mp, _ in fuse_mounts() if source == FSNAME and mp.startswith(str(tmp_path))]
    assert not mounts, f"mounts left behind: {mounts}"


@pytest.fixture
def fuse():
    """FUSE can mount here, else the test is skipped with why; under CI=true it fails instead (CI installs
    fuse3, so a skip there means the FUSE tests never ran)."""
    ok, why = fuse_available()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"FUSE is required under CI=true: {why}")
        pytest.skip(why)


@pytest.fixture
def browser():
    """A headless Chromium for the report tests, else the test is skipped with why; under CI=true it fails
    instead (`make test` installs chromium where it is root with apt, so a skip there means the browser
    tests never ran)."""
    from resilience.report.browser import browser_available

    ok, why = browser_available()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"a headless browser is required under CI=true: {why}")
        pytest.skip(why)
    return why


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a test skipped because a dependency is missing fails: CI installs every extra, so such a
    skip means a test that never runs."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get("CI") == "true"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "not installed" in reason or "No module named" in reason:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true for a missing dependency (install it in `make test`): {reason}"


@pytest.fixture
def small_tmpfs(tmp_path, request):
    """A real, small tmpfs (64 KiB; a test marked `@pytest.mark.tmpfs_size("192k")` asks for another size),
    for full and read-only disks. Needs root and mount(8): skipped elsewhere."""
    marker = request.node.get_closest_marker("tmpfs_size")
    size = marker.args[0] if marker else "64k"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) for a small tmpfs")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# Families that repeat one check over every combination (or signal) run a covering sample by default and
# every member under `-m slow`: the default suite must stay well under 15 minutes on CI's 2 cores. Each
# entry: the test, then the parameter ids it keeps by default (together the sample covers every format,
# sync and async).
SAMPLED = {
    "tests/faults/test_inject_ranks.py::test_crash_points": ("LEGACY-torch-sync", "GLOBAL-torch_dist-async"),
    "tests/faults/test_corruption_ranks.py::test_every_corruption_resumes_or_refuses": (
        "LEGACY-torch-sync",
        "LOCAL-torch-sync",
        "TORCH_DCP-torch_dcp-async",
    ),
    "tests/faults/test_crash_states_ranks.py::test_every_crash_state_resumes_from_a_durable_checkpoint": (
        "LOCAL-torch-sync",
        "GLOBAL-torch_dist-sync",
        "TORCH_DCP-torch_dcp-async",
    ),
    "tests/checkpoint/test_commit_integrity.py::test_failed_resave_never_tears_the_existing_checkpoint": (
        "LEGACY-torch-sync",
        "LOCAL-torch-sync",
        "GLOBAL-torch_dist-async",
        "TORCH_DCP-torch_dcp-sync",
    ),
    "tests/checkpoint/test_commit_integrity.py::test_corruption_is_detected_and_the_loader_falls_back": (
        "LEGACY-torch-sync",
        "LOCAL-torch-sync",
        "GLOBAL-torch_dist-async",
        "TORCH_DCP-torch_dcp-sync",
    ),
    "tests/report/test_interrupted.py::test_an_interrupted_matrix_keeps_the_finished_cases": ("15-143",),
    "tests/report/test_interrupted.py::test_an_interrupted_fuzz_keeps_a_row_per_finished_case_with_its_replay": (
        "2-130",
    ),
}


@pytest.hookimpl(tryfirst=True)  # before `-m 'not slow'` deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        keep = SAMPLED.get(item.nodeid.split("[")[0])
        callspec = getattr(item, "callspec", None)
        if keep is not None and callspec is not None and not any(k in callspec.id for k in keep):
            item.add_marker(pytest.mark.slow)
