"""The options a stock DCP user picks (resilience.backends.stock_dcp), with torch's defaults: what the
backend spec names (`--backend dcp:thread_count=4,async=process`) and the option sweep varies."""

from __future__ import annotations

from .options import Option

# what a DCP user can pick, with torch 2.13's defaults (FileSystemWriter, dcp.save, dcp.async_save)
OPTIONS: tuple[Option, ...] = (
    Option("thread_count", 1, "FileSystemWriter: writer threads per rank", between=(1, 64), sweep=(4,)),
    Option(
        "sync_files", True, "FileSystemWriter: fsync every data file before the save returns", choices=(True, False)
    ),
    Option(
        "single_file_per_rank",
        True,
        "FileSystemWriter: one data file per rank (false: one per item)",
        choices=(True, False),
    ),
    Option(
        "collectives",
        "on",
        "how ranks agree on a save: on (one central plan and .metadata), off "
        "(use_collectives=False: each rank plans alone and writes its own __R.metadata), no_dist "
        "(no_dist=True on save and load: every rank acts as a job of one)",
        choices=("on", "off", "no_dist"),
    ),
    Option(
        "async",
        "thread",
        "dcp.async_save's async_checkpointer_type: the upload runs in a thread of the "
        "rank or in a checkpoint process DCP spawns (its own gloo group)",
        choices=("thread", "process"),
        io="async",
    ),
    Option(
        "staging",
        "writer",
        "who copies the state before an async upload: writer (FileSystemWriter, "
        "a BlockingAsyncStager), cached (the writer with cache_staged_state_dict=True: buffers kept "
        "across saves), background (DefaultStager, use_async_staging: copies in a thread, async_save "
        "returns an AsyncSaveResponse), shared (DefaultStager into shared memory), pinned",
        choices=("writer", "cached", "background", "shared", "pinned"),
        io="async",
        refused={
            "pinned": "pinned host memory needs CUDA (StagingOptions.use_pinned_memory); this machine runs on CPU",
            "cached": "the cached copy is pinned host memory (BlockingAsyncStager allocates it with "
            "pin_memory=True), which needs CUDA; this machine runs on CPU",
        },
    ),
    Option(
        "process_group",
        "own",
        "the group async_save coordinates over: own (a new gloo group, as "
        "torchtitan makes it) or default (the default group, DCP's own default, shared with training)",
        choices=("own", "default"),
        io="async",
    ),
)
# on an object store (--storage s3): which client DCP writes with; on local files every value writes the same
OPTIONS = (
    *OPTIONS,
    Option(
        "client",
        "fsspec",
        "on an object store, DCP's writer and reader: fsspec (FsspecWriter over s3fs) or msc "
        "(multi-storage-client's MultiStorageFileSystemWriter, an msc:// profile on the same bucket)",
        choices=("fsspec", "msc"),
    ),
)
DEFAULTS = {o.name: o.default for o in OPTIONS}
