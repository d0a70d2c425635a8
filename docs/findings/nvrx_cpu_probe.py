"""Which parts of NVRx 0.4.1's local checkpointing run on CPU tensors over gloo: 2 rank processes on
loopback, one save (or two) and a load per case, each rank printing ok or where it failed.

    PYTHONPATH=. python docs/findings/nvrx_cpu_probe.py [CASE ...]     (default: every case)

Cases: basic_state_dict, sync, async, replica_own, replica_peer, default_jump, mcore_atomic,
mcore_fully_parallel (these two need megatron-core), hostile_pickle (rank 0's file gets a data.pkl that
appends to a marker file before it unpickles the original: does a load run it?).
Needs nvidia-resiliency-ext (extra [nvrx])."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CASES = (
    "basic_state_dict",
    "sync",
    "async",
    "replica_own",
    "replica_peer",
    "default_jump",
    "mcore_atomic",
    "mcore_fully_parallel",
    "hostile_pickle",
)


def _where(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)[-3:]
    return "; ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in frames)


def _mcore(rank: int, world: int, fill: float) -> dict:
    from megatron.core.dist_checkpointing import ShardedTensor

    return {
        "split": ShardedTensor.from_rank_offsets("split", torch.full((2, 3), fill + rank), (0, rank, world)),
        "repl": ShardedTensor.from_rank_offsets("repl", torch.full((4,), fill), replica_id=rank),
    }


def _plant(path: str, marker: str) -> None:
    """Rewrite the torch.save archive `path` so its data.pkl runs `echo ran >> marker` first. The
    original pickle follows unchanged (protocol 2: no frames, and the prefix uses no memo)."""
    import shlex
    import zipfile

    with zipfile.ZipFile(path) as z:
        entries = [(i, z.read(i.filename)) for i in z.infolist()]
    command = f"echo ran >> {shlex.quote(marker)}".encode()
    prefix = b"cposix\nsystem\n(X" + len(command).to_bytes(4, "little") + command + b"tR0"  # system(cmd); pop
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for info, data in entries:
            if info.filename.endswith("/data.pkl"):
                assert data[:2] == b"\x80\x02", "expected pickle protocol 2"
                data = data[:2] + prefix + data[2:]
            z.writestr(info, data)


def _case(case: str, rank: int, world: int, root: str) -> str:
    from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager
    from nvidia_resiliency_ext.checkpointing.local.replication import strategies

    from resilience.backends.nvrx import RecordsStateDict

    w = torch.full((4, 3), float(rank))
    repl = None
    if case in ("replica_own", "replica_peer"):
        repl = strategies.CliqueReplicationStrategy.from_replication_params(replication_jump=1, replication_factor=2)
    if case == "default_jump":
        repl = strategies.LazyCliqueReplicationStrategy()  # replication_jump=torch.cuda.device_count()
    if case.startswith("mcore"):
        from megatron.core.dist_checkpointing.tensor_aware_state_dict import MCoreTensorAwareStateDict

        algo = case.removeprefix("mcore_")
        sd, _ = MCoreTensorAwareStateDict.from_state_dict(_mcore(rank, world, 1.0), algo=algo)
        LocalCheckpointManager(root).save(sd, 1)
        manager = LocalCheckpointManager(root)
        manager.find_latest()
        loaded, _ = manager.load()
        out = loaded.to_state_dict(_mcore(rank, world, 9.0), algo=algo)
        return f"exact={torch.equal(out['split'], torch.full((2, 3), 1.0 + rank))}"
    if case == "basic_state_dict":
        from nvidia_resiliency_ext.checkpointing.local.basic_state_dict import BasicTensorAwareStateDict

        BasicTensorAwareStateDict({"w": w})
    manager = LocalCheckpointManager(root, repl_strategy=repl)
    manager.save(RecordsStateDict({"w": w.clone()}, {"iteration": 1}, {}), 1, is_async=case == "async")
    manager.save(RecordsStateDict({"w": w + 1}, {"iteration": 2}, {}), 2)
    files = sorted(os.listdir(os.path.join(root, str(rank))))
    dist.barrier()
    marker = os.path.join(root, "RAN")
    if case == "hostile_pickle" and rank == 0:
        _plant(os.path.join(root, "0", "iter_0000002_0_local.pt"), marker)
    if case == "replica_peer" and rank == 1:
        os.unlink(os.path.join(root, "1", "iter_0000002_1_local.pt"))  # rank 1 must fetch its replica
    dist.barrier()
    manager = LocalCheckpointManager(root, repl_strategy=repl)
    latest = manager.find_latest()
    loaded, _ = manager.load()
    planted = case == "hostile_pickle" and rank == 0
    ran = f", code from its file ran: {os.path.exists(marker)}" if planted else ""
    return f"files {files}, latest {latest}, exact={torch.equal(loaded.tensors_by_key['w'], w + 1)}{ran}"


def _rank(rank: int, world: int, port: int, root: str, case: str, out) -> None:
    warnings.simplefilter("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=30))
    try:
        out.put((rank, "ok " + _case(case, rank, world, root)))
    except BaseException as e:
        out.put((rank, f"FAILED {type(e).__name__}: {str(e)[:120]} [{_where(e)}]"))
    finally:
        dist.destroy_process_group()


def probe(case: str) -> list[tuple]:
    root = tempfile.mkdtemp(prefix=f"nvrx-{case}-")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = 20000 + (os.getpid() * 7 + CASES.index(case)) % 20000
    procs = [ctx.Process(target=_rank, args=(r, 2, port, root, case, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(out.get(timeout=90))
    except Exception:
        results.append(("-", "no answer within 90 s"))
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    shutil.rmtree(root, ignore_errors=True)
    return sorted(results, key=str)


if __name__ == "__main__":
    for case in sys.argv[1:] or CASES:
        for rank, said in probe(case):
            print(f"{case:22s} rank {rank}: {said}", flush=True)
