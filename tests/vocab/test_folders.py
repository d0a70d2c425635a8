"""vocab.folders: the names the reference writes are the ones its listing and the corruption find."""

import os

from resilience.checkpoint import commit
from resilience.faults import checkpoint_folders, iteration_in
from resilience.vocab.folders import (
    ITER_FOLDER,
    RANK_FOLDER,
    STAGING_PREFIX,
    iter_name,
    iteration_of,
    rank_root,
    staging_name,
)


def test_each_name_reads_back():
    assert iter_name(3) == "iter_0000003" and ITER_FOLDER.fullmatch(iter_name(3)).group(1) == "0000003"
    assert staging_name(4, "1f2e3d4c") == f"{STAGING_PREFIX}iter_0000004-1f2e3d4c"
    assert commit.staging_name(4).startswith(f"{STAGING_PREFIX}iter_0000004-")
    folder = rank_root("/ckpt", 12)
    assert folder == "/ckpt/local/rank_00012" and RANK_FOLDER.fullmatch(os.path.basename(folder)).group(1) == "00012"


def test_an_iteration_past_the_seven_digits_is_listed_and_a_padded_copy_is_not(tmp_path):
    """iter_%07d writes iter_10000000 past 9,999,999: the listing must find it (it wanted seven digits
    exactly, and every later checkpoint was lost); iter_00000012 is no name the reference writes."""
    for name in (iter_name(9_999_999), iter_name(10_000_000), "iter_00000012"):
        os.makedirs(tmp_path / name)
    assert iter_name(10_000_000) == "iter_10000000" and iteration_of("iter_00000012") is None
    assert [n for n, _ in commit.list_iterations(str(tmp_path))] == [10_000_000, 9_999_999]


def test_the_listing_and_the_corruption_find_the_same_folders(tmp_path):
    for path in [
        tmp_path / iter_name(2),
        tmp_path / staging_name(3, "abcdef12"),
        tmp_path / "iter_12",
        os.path.join(rank_root(str(tmp_path), 1), iter_name(1)),
    ]:
        os.makedirs(path)
    assert commit.list_iterations(str(tmp_path)) == [(2, str(tmp_path / iter_name(2)))]
    assert [(it, os.path.relpath(p, tmp_path), r) for it, p, r in checkpoint_folders(str(tmp_path))] == [
        (2, iter_name(2), None),
        (1, os.path.join("local", "rank_00001", iter_name(1)), 1),
    ]
    assert iteration_in(os.path.join("local", "rank_00001", iter_name(1), "x.pt")) == 1
