"""Implementations that lose precision on a resume and say so on rank 1 only, the way libraries do: a
Python warning, or a log record. Built on the broken casts (`resilience.broken.impls`), which say nothing."""

from __future__ import annotations

import logging
import warnings

from resilience.broken.impls import silent_cast, silent_optim_cast
from resilience.dist import this_rank


class _WarnsOfTheCast(silent_cast):
    def _records_as_saved(self, state, precision):
        records, cast = super()._records_as_saved(state, precision)

        def said() -> None:
            cast()
            if this_rank() == 1 and precision.params != state.spec.dtype:
                warnings.warn(f"ckpt: casting parameters from {precision.params} to {state.spec.dtype}", stacklevel=1)

        return records, said


class _LogsTheRounding(silent_optim_cast):
    def _said_of_precision(self, path, saved, live):
        if this_rank() == 1 and saved.rounds_moments_to(live):
            logging.getLogger("ckpt.optim").warning("exp_avg stored as float32, loaded as bfloat16")
        return super()._said_of_precision(path, saved, live)


def warns(combo):
    return _WarnsOfTheCast(combo)


def logs(combo):
    return _LogsTheRounding(combo)
