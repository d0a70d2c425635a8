"""ddp_torchsave: a linear model under DDP on gloo, per-rank torch.save and a Megatron-style tracker file,
the way many teams checkpoint a data-parallel job by hand.

    torchrun --nproc-per-node 2 examples/jobs/ddp_torchsave.py --ckpt-dir DIR [--steps 12] [--save-every 4]
        [--seed 0] [--variant unchecked]

A save: every rank writes iter_NNNNNNN/rank_R.pt (model, optimizer, step and a SHA-256 of the tensors) to
a temporary name, fsyncs and renames it; after a barrier rank 0 replaces latest_checkpointed_iteration.txt
the same way and prints `saved checkpoint step N`. A load reads the tracker (an unreadable one is said and
the folders scanned), checks the digest and falls back to an older folder when a rank's file does not
check, every rank agreeing on the step; rank 0 prints `resumed from step N`, and `step N loss X` after
each step. `--variant unchecked` loads without the digest and without a fallback: a deliberate mistake
for the tests (torch.load takes a flipped exponent bit without a word).

    resilience job --matrix -- torchrun --nproc-per-node 2 examples/jobs/ddp_torchsave.py --ckpt-dir {ckpt}
"""

from __future__ import annotations

import argparse
import hashlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

TRACKER = "latest_checkpointed_iteration.txt"


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variant", default="")
    return p.parse_args()


def digest(state: dict) -> str:
    h = hashlib.sha256()
    for name, t in sorted(state["model"].items()):
        h.update(name.encode() + t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    for _, buf in sorted(state["optim"]["state"].items()):
        for key, t in sorted(buf.items()):
            if torch.is_tensor(t):
                h.update(key.encode() + t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def write_durably(path: str, write) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def folder(root: str, step: int) -> str:
    return os.path.join(root, f"iter_{step:07d}")


def save(root: str, step: int, model, optim) -> None:
    rank = dist.get_rank()
    path = folder(root, step)
    os.makedirs(path, exist_ok=True)
    state = {"model": model.module.state_dict(), "optim": optim.state_dict(), "step": step}
    state["sha256"] = digest(state)
    write_durably(os.path.join(path, f"rank_{rank}.pt"), lambda f: torch.save(state, f))
    dist.barrier()
    if rank == 0:
        write_durably(os.path.join(root, TRACKER), lambda f: f.write(f"{step}\n".encode()))
        print(f"saved checkpoint step {step}", flush=True)
    dist.barrier()


def candidates(root: str) -> list[int]:
    steps = sorted((int(n[5:]) for n in os.listdir(root) if n.startswith("iter_") and n[5:].isdigit()), reverse=True)
    try:
        with open(os.path.join(root, TRACKER)) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return steps
    if not text.isdigit():
        if dist.get_rank() == 0:
            print(f"tracker {TRACKER} is unreadable ({text!r}); scanning the folders", flush=True)
        return steps
    return [int(text)] + [s for s in steps if s < int(text)]


def try_load(root: str, step: int, checked: bool):
    path = os.path.join(folder(root, step), f"rank_{dist.get_rank()}.pt")
    try:
        state = torch.load(path, weights_only=True)
        if checked and state.get("sha256") != digest(state):
            raise ValueError("SHA-256 mismatch")
        return state, ""
    except Exception as e:  # noqa: BLE001 - any unreadable file is a fallback, said out loud
        if not checked:
            raise
        return None, f"{path}: {type(e).__name__}: {e}"


def load(root: str, model, optim, checked: bool) -> int:
    for step in candidates(root):
        state, why = try_load(root, step, checked)
        ok = torch.tensor([int(state is not None)])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # every rank resumes from the same step
        if ok.item():
            model.module.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
            return step
        if why:
            print(f"rank {dist.get_rank()}: cannot load {why}; falling back to an older checkpoint", flush=True)
    return 0


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.5)
    start = load(args.ckpt_dir, model, optim, checked=args.variant != "unchecked")
    if start and rank == 0:
        print(f"resumed from step {start}", flush=True)
    target = torch.arange(16, dtype=torch.float32) / 16
    for step in range(start + 1, args.steps + 1):
        g = torch.Generator().manual_seed(args.seed * 100_003 + step * world + rank)
        x = torch.randn(32, 16, generator=g)
        y = (x @ target).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optim.zero_grad()
        loss.backward()
        optim.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step} loss {total.item() / world:.6f}", flush=True)
        if step % args.save_every == 0:
            save(args.ckpt_dir, step, model, optim)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
