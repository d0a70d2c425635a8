"""vocab.results.on_every_rank: the one rule for which LOCAL checkpoint a load may take."""

import pytest

from resilience.vocab import on_every_rank


@pytest.mark.parametrize(
    "per_rank, expected",
    [
        ([{1, 2, 3}, {1, 2, 3}], [3, 2, 1]),
        ([{1, 2, 3}, {1, 2}], [2, 1]),  # iteration 3 reached one rank only: not loadable
        ([{1, 3}, {2, 3}, {3}], [3]),
        ([{1}, {2}], []),  # no save on every rank
        ([{1, 2}, set()], []),  # a rank with nothing valid
        ([], []),  # no ranks
        ([[(2, 1), (2, 2)], [(2, 1)]], [(2, 1)]),  # a re-save (save 2) that reached one rank: the earlier save loads
    ],
)
def test_the_newest_held_by_every_rank_comes_first(per_rank, expected):
    assert on_every_rank(per_rank) == expected


def test_any_iterables_are_taken_once_each():
    assert on_every_rank(iter([iter([1, 2]), (k for k in (2, 1))])) == [2, 1]
