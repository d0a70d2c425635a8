import pytest


@pytest.fixture
def dirs(tmp_path, fuse):
    """(backing folder, mount point, log folder)."""
    out = tmp_path / "backing", tmp_path / "mnt", tmp_path / "log"
    for d in out[:2]:
        d.mkdir()
    return out
