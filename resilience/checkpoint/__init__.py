"""The reference checkpoint implementation of the seed's three layers (the words it shares with every
other implementation, such as Combination and LoadResult, are in resilience.vocab)."""

from .listing import list_checkpoints
from .reference import ReferenceBackend

__all__ = ["ReferenceBackend", "list_checkpoints"]
