import os

import pytest

from resilience.fusefs import FSNAME, fuse_available, fuse_mounts


@pytest.fixture
def fuse():
    """FUSE can mount here, else the test is skipped with why; under CI=true it fails instead (CI installs
    fuse3, so a skip there means the FUSE tests never ran)."""
    ok, why = fuse_available()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"FUSE is required under CI=true: {why}")
        pytest.skip(why)


@pytest.fixture(autouse=True)
def no_mount_left(tmp_path):
    """Every test ends with none of our mounts under its folder, whatever path it took out."""
    yield
    left = [mp for source, mp, _ in fuse_mounts() if source == FSNAME and mp.startswith(str(tmp_path))]
    assert not left, f"mounts left behind: {left}"


@pytest.fixture
def dirs(tmp_path, fuse):
    """(backing folder, mount point, log folder)."""
    out = tmp_path / "backing", tmp_path / "mnt", tmp_path / "log"
    for d in out[:2]:
        d.mkdir()
    return out
