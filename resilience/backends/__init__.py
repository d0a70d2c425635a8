"""Checkpoint implementations under test, behind one protocol (base.CheckpointBackend).

- `stock_dcp`: torch.distributed.checkpoint as its users use it (--backend dcp, dcp-threads);
- `megatron`: megatron-core's dist_checkpointing, optional extra [megatron] (--backend megatron).
The reference implementation (resilience.checkpoint.reference) and the broken ones (resilience.broken)
are backends too. Adapters are imported only when named, so a missing optional package costs nothing."""
from .base import CheckpointBackend, with_defaults

__all__ = ["CheckpointBackend", "with_defaults"]
