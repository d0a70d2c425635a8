"""A CPU training job in the torchtitan style: FSDP2 (`fully_shard` on a gloo CPU device mesh) and
`torch.distributed.checkpoint`, to run under `resilience job` as a team's job would. FSDP2 trains on CPU
with gloo as it does on GPUs (torch 2.13): its parameters are DTensors sharded over the ranks.

    torchrun --nproc-per-node 2 examples/jobs/fsdp2_dcp.py --ckpt-dir DIR [--steps 12] [--save-every 4]
        [--seed 0] [--keep 2] [--async-save]

    resilience job --matrix -- python -m torch.distributed.run --nproc-per-node 2 \\
        examples/jobs/fsdp2_dcp.py --ckpt-dir {ckpt}

A tiny two-layer model, each Linear and the root sharded by FSDP2, trains with AdamW under a LambdaLR
schedule on synthetic batches drawn from (seed, position, rank), deterministically: a resumed run prints
the losses of the run that never stopped.

A save (every --save-every steps): `dcp.save` of one Stateful app state (model and optimizer through
`get_state_dict`, the LR scheduler, the data loader's position, and each rank's SHA-256 of its own
shards and of the replicated state) into DIR/step-N, every rank writing its `__R_0.distcp` shard, rank 0
the `.metadata` last. With --async-save it is `dcp.async_save` on a gloo group of its own: training goes
on while it writes, the previous save is waited for before the next one and at the end. Once a save has
finished, rank 0 fsyncs the folders, prints `saved checkpoint step N` and only then deletes the step
folders beyond the newest --keep. A step folder left by an earlier run at the step about to be saved is
removed first, so no stale `.metadata` can vouch for new shards.

A load: the newest step-N folder holding a `.metadata`, `dcp.load` into the app state and the digests
checked; if any rank cannot load it (an unreadable shard, a digest mismatch), rank 0 says why for each
failing rank and every rank falls back to the next older folder; `resumed from step N` (rank 0). When
nothing loads the job says so and starts from scratch on a freshly built model.

Output (rank 0, flushed): `step N loss X` (6 decimals), `saved checkpoint step N`, `resumed from step N`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

DIM, HIDDEN, BATCH = 16, 32, 32
STEP_DIR = re.compile(r"step-(\d+)$")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", type=int, default=2, help="step folders kept (0: all)")
    p.add_argument("--async-save", action="store_true")
    return p.parse_args()


def schedule(step: int) -> float:
    """Warm up for 3 steps, then decay: the LR differs each step, so a scheduler not restored shows."""
    return min(1.0, (step + 1) / 3) * 0.95 ** max(0, step - 2)


class Loader(Stateful):
    """Synthetic batches drawn from (seed, position, rank); its position is its state, so a resume
    continues the data stream where the checkpoint left it."""

    def __init__(self, seed: int, rank: int, world: int):
        self.seed, self.rank, self.world, self.position = seed, rank, world, 0
        g = torch.Generator().manual_seed(seed)
        self.target = torch.randn(DIM, 1, generator=g) / DIM**0.5

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.position += 1
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.position * self.world + self.rank)
        x = torch.randn(BATCH, DIM, generator=g)
        return x, torch.sin(x @ self.target)

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = int(state["position"])


def digest(value, h=None) -> str:
    """SHA-256 of a (nested) state, DTensors by this rank's shard: DCP keeps no checksum of its own."""
    h = h or hashlib.sha256()
    if isinstance(value, DTensor):
        value = value.to_local()
    if isinstance(value, torch.Tensor):
        t = value.detach().contiguous().cpu()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode() + t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(f"<{key}>".encode())
            digest(value[key], h)
    elif isinstance(value, (list, tuple)):
        for item in value:
            digest(item, h)
    else:
        h.update(repr(value).encode())
    return h.hexdigest()


class AppState(Stateful):
    """What a checkpoint holds, as one Stateful: a load only checks and stages the state; `apply()`
    installs it once every rank has loaded, so no rank takes on a checkpoint another rank refused."""

    def __init__(self, model, optim, sched, loader):
        self.model, self.optim, self.sched, self.loader = model, optim, sched, loader
        self.key = f"rank{dist.get_rank()}"
        self.staged: dict | None = None

    def state_dict(self) -> dict:
        model, optim = get_state_dict(self.model, self.optim)
        state = {"model": model, "optim": optim, "sched": self.sched.state_dict(), "data": self.loader.state_dict()}
        state["sha256"] = {self.key: digest(state)}
        return state

    def load_state_dict(self, state: dict) -> None:
        want = state.pop("sha256")[self.key]
        if digest(state) != want:
            raise ValueError(f"SHA-256 mismatch of {self.key}'s state")
        self.staged = state

    def apply(self) -> None:
        state, self.staged = self.staged, None
        set_state_dict(self.model, self.optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.sched.load_state_dict(state["sched"])
        self.loader.load_state_dict(state["data"])


def build(args, mesh) -> AppState:
    """The same model, optimizer, schedule and data stream on every rank and in every run."""
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, schedule)
    return AppState(model, optim, sched, Loader(args.seed, dist.get_rank(), dist.get_world_size()))


def steps_on_disk(root: str) -> list[int]:
    """The step folders in root, newest first."""
    found = (STEP_DIR.match(n) for n in os.listdir(root))
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def folder(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step}")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def why_not(e: BaseException) -> str:
    """One line for a failed load: DCP's CheckpointException carries each failing rank's exception."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        return "; ".join(
            f"rank {r}: {why_not(f[0] if isinstance(f, tuple) else f)}" for r, f in sorted(failures.items())
        )
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def load(root: str, app: AppState) -> tuple[int, bool]:
    """Resume from the newest step folder every rank can load: its step (0 when none can), and whether a
    failed load was tried, which may have written into the model's shards."""
    found = steps_on_disk(root)
    complete = [s for s in found if os.path.exists(os.path.join(folder(root, s), ".metadata"))]
    for step in complete:
        why = ""
        try:
            dcp.load({"app": app}, checkpoint_id=folder(root, step))
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - a checkpoint that does not load is a fallback, said out loud
            why = why_not(e)
        whys: list[str] = [""] * dist.get_world_size()
        dist.all_gather_object(whys, why)  # every rank resumes from the same step
        if not any(whys):
            app.apply()
            return step, False
        app.staged = None
        if dist.get_rank() == 0:
            said = sorted({w for w in whys if w})  # DCP's own failures reach every rank alike
            print(f"cannot load step-{step} ({' / '.join(said)}); falling back to an older checkpoint", flush=True)
    if found and dist.get_rank() == 0:
        unfinished = [f"step-{s}" for s in found if s not in complete]
        said = [f"{', '.join(unfinished)} without .metadata: unfinished saves"] if unfinished else []
        said += [f"{len(complete)} with .metadata did not load"] if complete else []
        print(f"no checkpoint in {root} loads ({'; '.join(said)}); starting from scratch", flush=True)
    return 0, bool(complete)


class Saver:
    """Saves, acknowledges once a save has finished, and prunes only after that."""

    def __init__(self, root: str, keep: int, asynchronous: bool):
        self.root, self.keep, self.rank = root, keep, dist.get_rank()
        # an async save's collectives run in a thread of their own: a gloo group apart from training's
        self.group = dist.new_group(backend="gloo") if asynchronous else None
        self.pending: tuple[int, object] | None = None

    def save(self, step: int, app: AppState) -> None:
        self.wait()
        path = folder(self.root, step)
        if self.rank == 0 and os.path.exists(path):
            shutil.rmtree(path)  # an earlier run's folder at this step: no stale .metadata over new shards
        dist.barrier()
        if self.group is None:
            dcp.save({"app": app}, checkpoint_id=path)
            self.finished(step)
        else:
            self.pending = (step, dcp.async_save({"app": app}, checkpoint_id=path, process_group=self.group))

    def poll(self) -> None:
        """Acknowledge an async save as soon as it has finished, without waiting for it."""
        if self.pending and self.pending[1].done():
            self.wait()

    def wait(self) -> None:
        if self.pending:
            (step, future), self.pending = self.pending, None
            future.result()  # a failed save fails the job, as it would torchtitan's
            self.finished(step)

    def finished(self, step: int) -> None:
        if self.rank != 0:
            return
        fsync_dir(folder(self.root, step))
        fsync_dir(self.root)
        print(f"saved checkpoint step {step}", flush=True)
        if self.keep:
            for old in [s for s in steps_on_disk(self.root) if s <= step][self.keep :]:
                shutil.rmtree(folder(self.root, old))
            fsync_dir(self.root)


def main() -> None:
    args = parse()
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    app = build(args, mesh)
    start, tried = load(args.ckpt_dir, app)
    if start and rank == 0:
        print(f"resumed from step {start}", flush=True)
    if tried and not start:
        app = build(args, mesh)  # from scratch on a model no failed load wrote into
    saver = Saver(args.ckpt_dir, args.keep, args.async_save)
    for step in range(start + 1, args.steps + 1):
        x, y = app.loader.next()
        loss = nn.functional.mse_loss(app.model(x), y)
        app.optim.zero_grad()
        loss.backward()
        app.optim.step()
        app.sched.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step} loss {total.item() / world:.6f}", flush=True)
        saver.poll()
        if step % args.save_every == 0:
            saver.save(step, app)
    saver.wait()
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
