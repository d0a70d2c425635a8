"""The broken implementations: subclasses of the reference, each changing one thing. The catalogue
(`resilience.broken.CATALOGUE`) and `--backend broken:NAME` find each here by its name.

- `save_bugs`: saves and commits that lose durability, commit too early or drop an error;
- `load_bugs`: loads and resumes that skip a check or hand back what was not saved;
- `corner_bugs`: right on the matrix's fixed sample, wrong in one of its corners;
- `layout_bugs`: right on a dense tp/pp/dp model, wrong with experts or uneven and empty shards;
- `writer_process`: the reference with a forked background writer (`process_writer`), and its bugs;
- `patching`: what they share."""

from __future__ import annotations

from .corner_bugs import (
    chunk_tail_lost,
    clock_named_staging,
    finalize_timeout,
    lexical_newest,
    padding_dropped,
    resave_cleanup,
    rng_misnested,
    unreadable_manifest_unverified,
    zero_fills_missing,
    zero_is_none,
)
from .layout_bugs import (
    empty_shard_at_zero,
    expert_replica_without_etp,
    legacy_skips_tp_ranks,
    rank0_shard_lengths,
    stale_expert_moments,
)
from .load_bugs import (
    ignores_topology,
    no_checksum,
    rng_across_tp,
    silent_cast,
    silent_optim_cast,
    unsafe_unpickle,
    vpp_chunk_lost,
    wrong_dedup,
)
from .patching import patched
from .save_bugs import (
    async_no_snapshot,
    commit_before_all_ranks,
    in_place_overwrite,
    manifest_not_durable,
    mixed_resave,
    no_dir_fsync,
    no_fsync,
    poisoned_after_error,
    prunes_before_commit,
    retention_deletes_newest,
    swallowed_async_error,
    tracker_before_data,
)
from .store_bugs import loader_skips_set_aside, marker_copy_unchecked, rename_commit, store_errors_swallowed
from .writer_process import process_writer, writer_death_hangs, writer_never_respawned

__all__ = [
    "empty_shard_at_zero",
    "expert_replica_without_etp",
    "legacy_skips_tp_ranks",
    "rank0_shard_lengths",
    "stale_expert_moments",
    "store_errors_swallowed",
    "rename_commit",
    "loader_skips_set_aside",
    "marker_copy_unchecked",
    "unreadable_manifest_unverified",
    "padding_dropped",
    "zero_fills_missing",
    "chunk_tail_lost",
    "zero_is_none",
    "resave_cleanup",
    "lexical_newest",
    "finalize_timeout",
    "rng_misnested",
    "vpp_chunk_lost",
    "clock_named_staging",
    "async_no_snapshot",
    "commit_before_all_ranks",
    "ignores_topology",
    "in_place_overwrite",
    "manifest_not_durable",
    "mixed_resave",
    "no_checksum",
    "no_dir_fsync",
    "no_fsync",
    "patched",
    "poisoned_after_error",
    "process_writer",
    "prunes_before_commit",
    "retention_deletes_newest",
    "rng_across_tp",
    "silent_cast",
    "silent_optim_cast",
    "swallowed_async_error",
    "tracker_before_data",
    "unsafe_unpickle",
    "writer_death_hangs",
    "writer_never_respawned",
    "wrong_dedup",
]
