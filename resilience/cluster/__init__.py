"""Cluster runs: the rank side under torchrun (env:// rendezvous, one process per rank, any number of nodes,
shared storage given as a path), kills self-inflicted at an injection point and recovered by torchrun's own
restarts; the command lines for each node; a golden corpus of checkpoints for upgrades."""

from .spec import ClusterPlan, SharedFolder, TorchrunEnv

__all__ = ["ClusterPlan", "SharedFolder", "TorchrunEnv"]
