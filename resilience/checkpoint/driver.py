"""What every part of the reference shares (reference.ReferenceBackend is made of the parts): its
settings, who this rank is, and the write step of every save path: this rank's files into a staging
folder, with their sizes and checksums recorded as they are written (recorder), then its folders fsynced."""

from __future__ import annotations

import logging
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException

from .. import storage
from ..dist import gather_failures
from ..state import TrainingState
from ..state.precision import DTYPES, Precision
from ..storage.torch_save import without_crc32
from ..vocab import Combination, phases
from . import commit
from .formats.base import Format, RankInfo
from .recorder import recording

log = logging.getLogger("resilience.checkpoint")


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def state_model(info: RankInfo) -> dict:
    """The model a checkpoint must have been saved with to load into this rank's state."""
    return info.spec.to_dict()


def model_problem(saved: object, info: RankInfo) -> str | None:
    """Why a checkpoint saved with model `saved` (the manifest's) cannot load into this rank's state, or
    None. The precision alone may differ (the parameters' and the optimizer moments' dtypes): the load
    converts it (fp32 parameters are what bf16 training keeps as its fp32 main parameters), so it is no
    reason to refuse."""
    live = state_model(info)

    def rest(model: dict) -> dict:
        return {k: v for k, v in model.items() if k not in _PRECISION}

    if (
        not isinstance(saved, dict)
        or rest(saved) != rest(live)
        or saved.get("dtype") not in DTYPES
        or saved.get("optim_dtype", "fp32") not in DTYPES
    ):
        return f"saved with model {saved}, loading {live}"
    return None


_PRECISION = ("dtype", "optim_dtype")  # a manifest from before optim_dtype has none: its moments were fp32


def saved_precision(model: dict, state: TrainingState) -> Precision:
    """The precision a checkpoint's manifest says it was saved in (checked by model_problem)."""
    return Precision(model.get("dtype", state.spec.dtype), model.get("optim_dtype", "fp32"))


class Driver:
    """The settings every part reads, set by ReferenceBackend.__init__."""

    combo: Combination
    format: Format
    keep_last: int | None
    strict: bool
    _local_saves: dict[str, int]  # LOCAL: root -> the number of the newest save known of

    def _info(self, state: TrainingState, group: Any = None) -> RankInfo:
        return RankInfo.of(state, self.combo, group)

    def _write(self, info: RankInfo, records, staging: str) -> tuple[dict, str | None]:
        """(relpath -> size and checksum of every file this rank wrote, None) or ({}, its error).
        `records`, or a function returning them (an async snapshot that is still being copied)."""
        try:
            with recording() as rec:
                error = None
                try:
                    if callable(records):
                        records = records()
                    phases.reached("write", path=staging)
                    storage.current().mkdir(staging)
                except Exception as e:
                    error = describe(e)
                if self.format.layout == "global":
                    # a format's collectives must not start unless every rank is there to join them
                    if gather_failures(error, info.group):
                        return {}, error
                elif error:
                    return {}, error
                with without_crc32():  # the files are hashed as written: torch.save's CRC is a pass for nothing
                    self.format.write(info, records, staging)
            commit.fsync_tree_dirs(staging)
            return rec.files(staging), None
        except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
            log.debug("rank %d write failed", info.rank, exc_info=True)
            return {}, describe(e)
