"""A verified load's files (checkpoint.verified) and its agreements (loading.agreed): no listed byte is
parsed unchecked, each checked file is read once, and every rank learns the same first problem."""

import os

import pytest

from resilience.checkpoint.loading import agreed
from resilience.checkpoint.verified import VerifiedFiles
from resilience.errors import IntegrityError
from resilience.launch import run_ranks
from resilience.storage.held import MemoryFile, read_hashed
from resilience.storage.local import LocalFileSystem


class CountingFileSystem(LocalFileSystem):
    def __init__(self):
        self.opened: list[str] = []

    def open_read(self, path):
        self.opened.append(os.path.basename(path))
        return super().open_read(path)


def _checkpoint(tmp_path, names=("mine", "theirs", "shared")):
    files = {}
    for name in names:
        path = tmp_path / name
        path.write_bytes(name.encode() * 1000)
        files[name] = {"size": 1000 * len(name), "xxh3_128": read_hashed(str(path), 1000 * len(name))[1]}
    return str(tmp_path), files


def _flip(path):
    with open(path, "r+b") as f:
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 1]))


def test_own_files_are_checked_and_held_others_read_from_disk_after(tmp_path):
    folder, files = _checkpoint(tmp_path)
    disk = CountingFileSystem()
    fs = VerifiedFiles(disk, folder, files, ["mine"])
    with fs.open_read(os.path.join(folder, "shared")) as f:  # before the agreement: checked by its opener
        assert isinstance(f, MemoryFile) and f.read() == b"shared" * 1000
    fs.verify_owned()
    for _ in range(2):
        with fs.open_read(os.path.join(folder, "mine")) as f:
            assert isinstance(f, MemoryFile)
    with fs.open_read(os.path.join(folder, "theirs")) as f:  # its owner checked it: from disk, as it is
        assert not isinstance(f, MemoryFile) and f.read() == b"theirs" * 1000
    assert disk.opened == ["shared", "mine", "theirs"]  # each read once


def test_a_damaged_own_file_is_the_problem_raised_naming_it(tmp_path):
    folder, files = _checkpoint(tmp_path)
    _flip(tmp_path / "mine")
    fs = VerifiedFiles(LocalFileSystem(), folder, files, ["mine"])
    with pytest.raises(IntegrityError, match="mine: checksum failed"):
        fs.verify_owned()
    assert fs.checked_owned and "mine" in str(fs.problem)
    with pytest.raises(IntegrityError, match="mine: checksum failed"):  # every later read of a listed file
        fs.open_read(os.path.join(folder, "shared"))


def test_a_damaged_file_opened_before_the_agreement_is_never_returned(tmp_path):
    folder, files = _checkpoint(tmp_path)
    _flip(tmp_path / "shared")
    fs = VerifiedFiles(LocalFileSystem(), folder, files, ["mine"])
    with pytest.raises(IntegrityError, match="shared: checksum failed"):
        fs.open_read(os.path.join(folder, "shared"))
    with pytest.raises(IntegrityError, match="shared: checksum failed"):
        fs.verify_owned()  # the rank's plan step fails with it: every rank learns it there


def test_an_unlisted_file_passes_through(tmp_path):
    folder, files = _checkpoint(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    fs = VerifiedFiles(LocalFileSystem(), folder, files, ["mine"])
    with fs.open_read(os.path.join(folder, "manifest.json")) as f:
        assert f.read() == b"{}"
    assert not fs.files


def test_agreed_in_one_process():
    assert agreed(None, None) is None and agreed("", None) is None
    assert agreed("a", "b") == "a" and agreed(None, "b") == "b"


def _agree(ctx):
    return {
        "none": agreed(None),
        "one": agreed("bad" if ctx.rank == 2 else None),
        # rank 0's read error came from rank 1's failed check: the check is what every rank reports
        "precedence": agreed("checksum of f" if ctx.rank == 1 else None, "read failed" if ctx.rank in (0, 1) else None),
    }


@pytest.mark.multiprocess
def test_agreed_across_ranks_gives_every_rank_the_first_problem_of_the_first_kind():
    results = run_ranks(_agree, 3, timeout=60)
    assert results == [{"none": None, "one": "bad", "precedence": "checksum of f"}] * 3
