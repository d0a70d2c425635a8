"""A progress bar on stderr (tqdm) that also prints one line per finished item."""
from __future__ import annotations

import sys

from tqdm import tqdm


class Progress:
    def __init__(self, total: int, unit: str):
        self.bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False,
                        disable=None)  # None: off when stderr is not a terminal

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def note(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
