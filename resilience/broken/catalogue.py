"""The catalogue of the broken implementations: each by its name, what it breaks, which checker should
catch it and in which matrix column, and `make_broken(name, combo)`, what `--backend broken:NAME` makes (the
implementations themselves are resilience.broken.impls). It sits below the runner, which makes them, and
above the implementations it names."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class BrokenImpl:
    """One broken implementation: `make_broken(name, combo)` makes it (resilience.broken.impls.<name>)."""

    name: str
    bug: str
    caught_by: str  # the checker expected to catch it
    column: str  # the matrix column (fault or transition) that reveals it
    combos: tuple[str, ...] = ()  # combinations it applies to (empty: every combination)
    witness: str = ""  # one of them where the column is known to reveal it (the fast test runs that one)


CATALOGUE = {
    b.name: b
    for b in [
        BrokenImpl(
            "tracker_before_data",
            "writes the tracker before the data and trusts it blindly on load",
            "durability",
            "kill",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "no_fsync", "never fsyncs files or folders", "durability", "lost_unsynced", witness="LEGACY/torch/sync"
        ),
        BrokenImpl(
            "no_dir_fsync",
            "fsyncs files but never the folders holding them",
            "durability",
            "lost_unsynced",
            witness="LOCAL/torch/sync",
        ),
        # a random flipped byte may land in a zip header's padding, which no loader reads: the DCP
        # combinations are the ones whose seed-0 flip lands in tensor data
        BrokenImpl(
            "no_checksum",
            "does not verify checksums on load",
            "integrity",
            "bitflip",
            witness="TORCH_DCP/torch_dcp/sync",
        ),
        # the hostile pickle of a torch.save file: the combinations that keep their tensors in one
        BrokenImpl(
            "unsafe_unpickle",
            "loads its torch.save files with weights_only=False: a pickle in a checkpoint runs code",
            "integrity",
            "pickle",
            ("LEGACY/torch/sync", "LOCAL/torch/sync"),
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "in_place_overwrite",
            "writes straight into the final folder, no staging",
            "durability",
            "kill",
            witness="GLOBAL/torch_dist/async",
        ),
        BrokenImpl(
            "commit_before_all_ranks",
            "the coordinator commits without waiting for the other ranks",
            "durability",
            "kill",
            witness="LEGACY/torch/sync",
        ),
        # a crash never reaches finalize: a write *error* is what finalize could swallow
        BrokenImpl(
            "swallowed_async_error",
            "finalize swallows a failed background write and reports success",
            "durability",
            "io_error",
            ("GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/async"),
            witness="GLOBAL/torch_dist/async",
        ),
        BrokenImpl(
            "ignores_topology",
            "the legacy loader ignores a tp/pp change and loads what overlaps",
            "topology_independence",
            "tp",
            ("LEGACY/torch/sync",),
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "wrong_dedup",
            "treats distributed-optimizer state as replicated over dp and keeps dp rank 0's",
            "durability",
            "dp",
            ("LEGACY/torch/sync",),
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "rng_across_tp",
            "claims the RNG restored after a tp or pp change",
            "resume_equivalence",
            "tp",
            (
                "GLOBAL/torch_dist/sync",
                "GLOBAL/torch_dist/async",
                "TORCH_DCP/torch_dcp/sync",
                "TORCH_DCP/torch_dcp/async",
            ),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "mixed_resave",
            "a re-save of an existing iteration keeps every other data file of the old save",
            "generations",
            "resave",
            ("GLOBAL/torch_dist/sync", "LEGACY/torch/sync", "TORCH_DCP/torch_dcp/sync"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "retention_deletes_newest",
            "keep-last-1 retention that keeps the oldest instead",
            "durability",
            "save/load",
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "prunes_before_commit",
            "keep-last-1 retention that removes the previous checkpoint as a save begins",
            "retention",
            "save/load",
            combos=("GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/sync"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "manifest_not_durable",
            "writes the manifest without fsync",
            "durability",
            "lost_unsynced",
            witness="LOCAL/torch/sync",
        ),
        # the stale write shows once a load picks the checkpoint written late: after the next save failed
        BrokenImpl(
            "async_no_snapshot",
            "async save reads the live tensors when the writer runs, no snapshot",
            "atomic_commit",
            "kill",
            ("GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/async"),
            witness="TORCH_DCP/torch_dcp/async",
        ),
        # a restart starts a clean process: only the same job saving again after the failed save shows it
        BrokenImpl(
            "poisoned_after_error",
            "a failed save leaves its 'save in progress' flag set: every later save in the process refuses",
            "recovery",
            "io_error",
            witness="GLOBAL/torch_dist/sync",
        ),
        # a background writer process killed mid-write (the rank lives on): process_writer in broken/impls.py
        # is the same implementation done right, and passes the column
        BrokenImpl(
            "writer_death_hangs",
            "keeps its copy of the writer process's pipe end, so a killed writer leaves finalize waiting forever",
            "hang",
            "writer_kill",
            ("GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/async"),
            witness="GLOBAL/torch_dist/async",
        ),
        BrokenImpl(
            "writer_never_respawned",
            "one writer process for the life of the backend, never replaced once it died: every later save fails",
            "recovery",
            "writer_kill",
            ("GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/async"),
            witness="GLOBAL/torch_dist/async",
        ),
        BrokenImpl(
            "silent_cast",
            "a resume in another precision casts the saved parameters to the new dtype, ignores "
            "the fp32 main parameters and says nothing",
            "precision",
            "to-fp32",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "silent_optim_cast",
            "a resume into bf16 optimizer moments rounds the saved fp32 moments and says nothing of the loss",
            "precision",
            "optim-to-bf16",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "vpp_chunk_lost",
            "loads a rank's interleaved layer chunks as one run of layers: the wrong layers, of the same shape",
            "resume_equivalence",
            "vpp-on",
            (
                "GLOBAL/torch_dist/sync",
                "GLOBAL/torch_dist/async",
                "TORCH_DCP/torch_dcp/sync",
                "TORCH_DCP/torch_dcp/async",
            ),
            witness="GLOBAL/torch_dist/sync",
        ),
        # the layouts of large jobs (experts, uneven and empty shards): each right on a dense tp/pp/dp model
        BrokenImpl(
            "expert_replica_without_etp",
            "describes an expert's etp piece as the whole expert, replicated over etp: only etp rank 0's is saved",
            "durability",
            "etp",
            ("GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "legacy_skips_tp_ranks",
            "LEGACY files per (tp, pp, ep) by expert-data-parallel rank 0: with tp > ep x etp some are never written",
            "durability",
            "moe-dp",
            ("LEGACY/torch/sync",),
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "empty_shard_at_zero",
            "writes an empty shard as a chunk at offset 0, where it collides with the real one",
            "durability",
            "empty-shards-resharded",
            ("GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "rank0_shard_lengths",
            "keeps the distributed optimizer's shard lengths in rank 0's common state and takes them on every rank",
            "symmetry",
            "moe",
            ("GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"),
            witness="GLOBAL/torch_dist/sync",
        ),
        # on an object store (the s3-* columns run with --storage s3): a request the fault proxy fails or a
        # coordinator it kills at a copy
        BrokenImpl(
            "store_errors_swallowed",
            "drops every failed upload and copy of the object store: a save reports done with an object missing",
            "durability",
            "s3-503",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "rename_commit",
            "commits by a rename the object store emulates with copies and deletes: a re-save cut short loses "
            "the iteration",
            "durability",
            "s3-resave-kill",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "marker_copy_unchecked",
            "says a save failed when the copy of its commit marker raised, never reading it back: the store did "
            "it, its answer lost, and the checkpoint it called failed loads",
            "atomic_commit",
            "s3-lost-marker",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "loader_skips_set_aside",
            "lists iter_N folders as on a disk and never the copy a re-save set aside on an object store",
            "durability",
            "s3-resave-kill",
            witness="TORCH_DCP/torch_dcp/sync",
        ),
        BrokenImpl(
            "stale_expert_moments",
            "loads the experts' parameters but leaves their Adam moments as they were",
            "resume_equivalence",
            "ep",
            (
                "GLOBAL/torch_dist/sync",
                "GLOBAL/torch_dist/async",
                "TORCH_DCP/torch_dcp/sync",
                "TORCH_DCP/torch_dcp/async",
            ),
            witness="TORCH_DCP/torch_dcp/sync",
        ),
        # the corners (runner.corners): each right on the matrix's fixed sample
        BrokenImpl(
            "lexical_newest",
            "takes the newest checkpoint to be the last folder name in text order",
            "durability",
            "past-the-padding",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "zero_is_none",
            "reads a checkpoint at iteration 0 as no checkpoint and starts over",
            "durability",
            "iteration-zero",
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "resave_cleanup",
            "a resume's clean-up after a crashed re-save removes the committed copy of that iteration too",
            "durability",
            "crash-during-resave",
            ("LEGACY/torch/sync", "GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/sync"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "chunk_tail_lost",
            "writes in 64 KiB chunks and loses the last partial chunk of a tensor larger than one",
            "durability",
            "sizes-and-empty-shards",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "zero_fills_missing",
            "a LEGACY loader that takes a missing distrib_optim.pt for none and fills the optimizer state with zeros",
            "integrity",
            "delete:distrib_optim.pt",
            ("LEGACY/torch/sync",),
            witness="LEGACY/torch/sync",
        ),
        BrokenImpl(
            "padding_dropped",
            "restores the vocabulary's real rows only and leaves its padding rows zero",
            "atomic_commit",
            "padding-with-values",
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "unreadable_manifest_unverified",
            "takes a checkpoint whose manifest does not parse for an older format without checksums",
            "integrity",
            "manifest-and-data",
            ("LEGACY/torch/sync", "GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/sync"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "rng_misnested",
            "places each rank's RNG by coordinates nested tp, pp, dp: on pp 2 x dp 2 one stage's RNG fills both cells",
            "generations",
            "pp-and-dp-saved",
            ("GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "clock_named_staging",
            "each rank names the staging folder from the second it started: one save split over two folders",
            "durability",
            "start-up-crosses-a-second",
            (
                "LEGACY/torch/sync",
                "GLOBAL/torch_dist/sync",
                "GLOBAL/torch_dist/async",
                "TORCH_DCP/torch_dcp/sync",
                "TORCH_DCP/torch_dcp/async",
            ),
            witness="GLOBAL/torch_dist/sync",
        ),
        BrokenImpl(
            "finalize_timeout",
            "an async finalize waits half a second for the writer, then acknowledges the save and never commits it",
            "durability",
            "slow-storage",
            ("GLOBAL/torch_dist/async", "TORCH_DCP/torch_dcp/async"),
            witness="GLOBAL/torch_dist/async",
        ),
    ]
}


def make_broken(name: str, combo):
    """The broken backend `name` for `combo`."""
    from . import impls  # torch and the reference: only once a broken backend is made

    if name not in CATALOGUE:
        raise ConfigError("backend", f"no broken implementation {name!r}", f"choose from {', '.join(CATALOGUE)}")
    return getattr(impls, name)(combo)
