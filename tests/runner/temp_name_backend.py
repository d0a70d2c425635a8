"""A library that writes each shard under a temporary name carrying its process id and a random part
(`rank_1.pt.tmp-<pid>-<hex>`), through resilience.storage, then renames it into place: no later run writes
the probe save's temp names, so only a layout that keeps what is stable can aim at them."""

from __future__ import annotations

import io
import json
import os
import uuid

import torch

from resilience.dist import barrier, this_rank
from resilience.state.sharding import ShardedTensor
from resilience.storage.seam import current
from tests.backends.inhouse import INDEX, LATEST, InhouseBackend


def _write(path: str, data: bytes) -> None:
    fs = current()
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stream = fs.open_write(tmp)
    stream.write(data)
    stream.close()
    fs.rename(tmp, path)


class TempNameBackend(InhouseBackend):
    def save(self, state, root: str) -> None:
        folder = os.path.join(root, f"iter_{state.iteration}")
        os.makedirs(folder, exist_ok=True)
        shard = {r.key: (r.data if isinstance(r, ShardedTensor) else r.value) for r in state.sharded_state_dict()}
        buf = io.BytesIO()
        torch.save(shard, buf)
        _write(os.path.join(folder, f"rank_{this_rank()}.pt"), buf.getvalue())
        barrier()
        if this_rank() == 0:
            _write(os.path.join(folder, INDEX), json.dumps({"topology": str(state.topo)}).encode())
            _write(os.path.join(root, LATEST), str(state.iteration).encode())
        barrier()


def factory(combo) -> TempNameBackend:
    return TempNameBackend(combo)


factory.combinations = ("LOCAL/torch/sync",)
factory.io_through_seam = True  # type: ignore[attr-defined]
