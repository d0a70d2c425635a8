"""Checkpoint implementations under test, behind one protocol (base.CheckpointBackend).

- `stock_dcp`: torch.distributed.checkpoint as its users use it (--backend dcp, dcp-threads); its options in
  `stock_dcp_options`, how the framework observes its file operations in `dcp_observation`;
- `megatron`: megatron-core's dist_checkpointing, optional extra [megatron] (--backend megatron);
- `nvrx`: NVIDIA Resiliency Extension's local checkpoint manager, optional extra [nvrx] (--backend nvrx).
The reference implementation (resilience.checkpoint.reference) and the broken ones (resilience.broken)
are backends too. Adapters are imported only when named, so a missing optional package costs nothing.
Each adapter declares the options its library's users pick (`options.Option`, on the factory as
`options`); a backend spec gives them: `dcp:thread_count=4,async=process`.

What an adapter of your own imports from here: CheckpointBackend (the protocol), LoadResult and CheckpointInfo
(what its load and list_checkpoints return); docs/adapters.md walks through one."""

from .base import CheckpointBackend, CheckpointInfo, LoadResult, with_defaults

__all__ = ["CheckpointBackend", "CheckpointInfo", "LoadResult", "with_defaults"]
