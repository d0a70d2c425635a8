"""Which files a checkpoint reader may open: regular files inside the checkpoint folder, symlinks followed.
Real folders, symlinks, a FIFO and a socket; nothing outside is read."""

from __future__ import annotations

import os
import socket

import pytest

from resilience.errors import IntegrityError
from resilience.storage.contained import check_folder, check_inside, check_regular, is_inside, kind_of, open_regular


@pytest.fixture
def tree(tmp_path):
    """root/ (the checkpoint folder) with a file, a folder and links in and out; outside/ beside it, and
    root-evil/, whose name starts like root's."""
    root, outside, evil = tmp_path / "root", tmp_path / "outside", tmp_path / "root-evil"
    for d in (root / "iter_1", outside, evil):
        d.mkdir(parents=True)
    (root / "iter_1" / "shard.pt").write_bytes(b"data")
    (outside / "secret").write_text("SECRET")
    (evil / "x").write_text("x")
    os.symlink("iter_1/shard.pt", root / "inner-link")  # stays inside
    os.symlink(outside / "secret", root / "outer-link")  # leaves
    os.symlink("../outside", root / "iter_link")  # a whole folder that leaves
    os.symlink(outside / "missing", root / "dangling")
    return root


@pytest.mark.parametrize(
    "rel, inside",
    [
        (".", True),
        ("iter_1/shard.pt", True),
        ("inner-link", True),
        ("iter_1/../iter_1/shard.pt", True),
        ("outer-link", False),
        ("iter_link/secret", False),
        ("../outside/secret", False),
        ("iter_1/../../outside/secret", False),
        ("../root-evil/x", False),  # a sibling whose name merely starts with the root's
        ("..", False),
    ],
)
def test_is_inside_follows_symlinks_and_dot_dot(tree, rel, inside):
    path = os.path.join(str(tree), rel)
    assert is_inside(path, str(tree)) is inside
    if inside:
        check_inside(path, str(tree))
    else:
        with pytest.raises(IntegrityError, match="inside the checkpoint folder failed: a symlink leads outside"):
            check_inside(path, str(tree))


def test_a_root_given_through_a_symlink_is_the_same_root(tree, tmp_path):
    os.symlink(tree, tmp_path / "alias")
    assert is_inside(str(tmp_path / "alias" / "iter_1" / "shard.pt"), str(tree))
    assert is_inside(str(tree / "iter_1" / "shard.pt"), str(tmp_path / "alias"))
    assert not is_inside(str(tmp_path / "alias" / "outer-link"), str(tmp_path / "alias"))


def test_only_regular_files_are_opened(tree, tmp_path):
    with open_regular(str(tree / "inner-link")) as f:  # a link that stays inside is followed
        assert f.read() == b"data"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(IntegrityError, match="regular file failed: is a FIFO; refused without opening it"):
        open_regular(str(tmp_path / "fifo"))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "sock"))
        with pytest.raises(IntegrityError, match="is a socket"):
            check_regular(str(tmp_path / "sock"))
    finally:
        sock.close()
    with pytest.raises(IntegrityError, match="is a character device"):
        check_regular("/dev/null")
    with pytest.raises(IsADirectoryError):
        open_regular(str(tree / "iter_1"))
    with pytest.raises(FileNotFoundError):
        open_regular(str(tree / "dangling"))
    assert check_regular(str(tree / "iter_1" / "shard.pt")).st_size == 4


def test_a_checkpoint_folder_must_be_a_readable_folder(tree):
    check_folder(str(tree / "iter_1"))
    check_folder(str(tree / "iter_link"))  # a folder, wherever it is: check_inside judges the place
    cases = {
        "dangling": "checkpoint folder failed: is a dangling symlink, not a folder",
        "gone": "checkpoint folder failed: is gone, not a folder",
        "inner-link": "checkpoint folder failed: is a regular file, not a folder",
    }
    for name, says in cases.items():
        with pytest.raises(IntegrityError, match=says):
            check_folder(str(tree / name))


def test_kind_of_names_each_type():
    import stat

    assert [
        kind_of(m) for m in (stat.S_IFREG, stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK, stat.S_IFDIR)
    ] == ["a regular file", "a FIFO", "a character device", "a block device", "a socket", "a folder"]
