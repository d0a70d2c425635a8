"""How much memory a model takes on one machine, known before any rank starts, and the ceiling on it.

A scenario runs every rank on this machine, and the runner replays the same training on one rank in
its own process to know what a bit-exact resume must give. A model too large for the machine must be a
clear error at load time, not ranks that swap, get OOM-killed, or allocate for minutes."""

from __future__ import annotations

from ..errors import ConfigError
from .model import ModelSpec
from .topology import Topology

# Bytes per model element in one full replica, a generous estimate: fp32 values, both Adam moments, a
# master copy, the gradient and the step's temporaries, plus the copies a save or a load holds.
BYTES_PER_ELEMENT = 64
MEMORY_FRACTION = 0.25  # of the machine's physical memory, for all ranks and the runner together
# Memory of one rank process of its own (forked: torch's pages are shared), and what it grows by per rank of
# the world (gloo keeps a connection to every peer of every group): the machine's peak in use over a whole
# kill-and-resume case with experts (`python -m benchmarks scenario --moe-worlds 64 128 256`) was 7 MiB per
# rank at 64 ranks, 12 at 128 and 15.5 at 256 (since no rank unpickles every rank's plans and metadata:
# checkpoint/formats/dcp_steps.py); 12 MiB + 20 KiB per peer bounds each.
PROCESS_BYTES = 12 << 20
PEER_BYTES = 20 << 10


def process_bytes(world: int) -> int:
    """The memory one rank process of a job of `world` ranks takes of its own."""
    return PROCESS_BYTES + PEER_BYTES * world


def model_elements(spec: ModelSpec, tp: int = 1) -> int:
    """Elements of every parameter of `spec` (vocabulary padded for `tp`), in closed form: no per-layer
    list is built, so a spec with absurd sizes costs nothing to measure."""
    h, f, v = spec.hidden, spec.ffn_hidden, spec.padded_vocab(tp)
    per_layer = 2 * h + 4 * h * h + 2 * f * h  # two norms, qkv + proj, fc1 + fc2
    if spec.num_experts:  # a router and the experts instead of one MLP, and the shared experts' MLP
        per_layer += spec.num_experts * h + (spec.num_experts - 1 + spec.shared_experts) * 2 * f * h
    sized = sum(n for _, n in spec.sized_params)
    return spec.num_layers * per_layer + h + 2 * v * h + sized  # + final norm, embedding and output layer


def job_bytes(spec: ModelSpec, topo: Topology) -> int:
    """Estimated memory of a job on `topo`: tp and pp split the model, each of dp x cp ranks (or of the
    expert-data-parallel ranks, when more) holds a replica
    (a conservative bound for the distributed optimizer), the runner holds one more, and each rank process
    takes PROCESS_BYTES of its own."""
    replicas = max(topo.dpcp, topo.edp if spec.num_experts else 1)  # experts are replicated over edp
    return model_elements(spec, topo.tp) * (replicas + 1) * BYTES_PER_ELEMENT + topo.world * process_bytes(topo.world)


def memory_ceiling() -> int:
    """MEMORY_FRACTION of this machine's physical memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total * MEMORY_FRACTION)


def check_fits(spec: ModelSpec, topo: Topology, ceiling: int | None = None) -> None:
    """ConfigError when a job of `spec` on `topo` needs more than the ceiling (default: memory_ceiling())."""
    ceiling = memory_ceiling() if ceiling is None else ceiling
    need = job_bytes(spec, topo)
    if need > ceiling:
        raise ConfigError(
            "model",
            f"needs about {_gib(need)} of memory on {topo} ({model_elements(spec, topo.tp):,} "
            f"elements, {topo.world} rank processes), more than the ceiling of {_gib(ceiling)} "
            f"({MEMORY_FRACTION:.0%} of this machine's memory)",
            "use fewer ranks"
            if topo.world * process_bytes(topo.world) > ceiling // 2
            else "use a smaller hidden, ffn_hidden, vocab or num_layers",
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


__all__ = [
    "BYTES_PER_ELEMENT",
    "MEMORY_FRACTION",
    "PEER_BYTES",
    "PROCESS_BYTES",
    "check_fits",
    "job_bytes",
    "memory_ceiling",
    "model_elements",
    "process_bytes",
]
