"""Adapters with the mistakes a first draft makes, for `resilience adapter check` to name
(`tests.runner.bad_adapters:NAME`). Built on the plain in-house library of tests/backends/inhouse.py."""

from __future__ import annotations

import os

from resilience.dist import this_rank as _rank
from resilience.state import ShardedTensor
from tests.backends.inhouse import InhouseBackend, load_shard, read_latest


class _Sloppy(InhouseBackend):
    """The library's own errors and answers, untranslated: FileNotFoundError on an empty folder, a shape
    mismatch on another topology, a dict from load, bare iteration numbers from list_checkpoints."""

    def load(self, state, root):
        iteration, _ = read_latest(root)
        shard = load_shard(root, iteration, _rank())
        for r in state.sharded_state_dict():
            if isinstance(r, ShardedTensor):
                r.data.copy_(shard[r.key])
        return {"iteration": iteration}

    def list_checkpoints(self, root):
        return [int(n[5:]) for n in sorted(os.listdir(root)) if n.startswith("iter_")]


def sloppy(combo):
    """No `combinations` declared: every command would run all six."""
    return _Sloppy(combo)


class _Forgetful(InhouseBackend):
    """Fills the tensors but never calls state.load_objects (iteration, data position and RNG stay as they
    were), is declared under GLOBAL semantics though the library refuses every topology change, and claims
    its I/O goes through the storage seam."""

    def __init__(self, combo):
        self.combo = combo

    def load(self, state, root):
        state.load_objects = lambda objects: None  # the call the draft forgot
        return super().load(state, root)


def forgetful(combo):
    return _Forgetful(combo)


forgetful.combinations = ("GLOBAL/torch_dist/sync",)
forgetful.io_through_seam = True  # it claims every byte goes through resilience.storage; none does


def refuses_everything(combo):
    from resilience.errors import ConfigError

    raise ConfigError("combination", f"not {combo}")


def vague(combo):
    """A draft whose contract promises something the framework does not know."""
    return _Forgetful(combo)


vague.contract = {"tp": "maybe"}


def promises_dp(combo):
    """A draft that states dp changes load, though the library refuses every topology change: the change
    of dp alone shows it (its tp and dp change is refused as promised)."""
    from tests.backends.inhouse import InhouseBackend as _Plain

    return _Plain(combo)


promises_dp.combinations = ("LOCAL/torch/sync",)
promises_dp.contract = {"tp": "refuse", "pp": "refuse", "dp": "load"}
