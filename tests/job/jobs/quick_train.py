"""A training job without torch, for the tests of `resilience job`: a launcher that starts one worker per
rank as torchrun does (each in a session of its own, RANK and WORLD_SIZE in its environment, every worker
stopped and exit 1 once one fails), and workers that train a replicated vector of weights on data drawn
from the seed and the step, save per rank, and keep a Megatron-style tracker.

    python quick_train.py --ckpt-dir DIR [--nproc 2] [--steps 12] [--save-every 4] [--seed 0] [--variant V]

The output follows the example jobs' conventions: `resumed from step N`, `step N loss X`, `saved checkpoint
step N` (rank 0). A save: each rank writes iter_NNNNNNN/rank_R.bin (a header, the step, the weights and
a CRC) to a temporary name, fsyncs and renames it; after a barrier (through the launcher, as a collective)
rank 0 replaces the tracker (latest_checkpointed_iteration.txt) the same way and acknowledges. A load checks the CRC and
falls back to the newest older folder that checks, saying so; an unreadable tracker is said and the
folders are scanned.

Variants, each a deliberate mistake for one checker to catch (or a bad input): scratch (never resumes),
unchecked (loads without the CRC, no fallback), skip_data (after a resume the data stream is one step
ahead), hang_on_resume (and hang_on_resume_with_stacks, having registered faulthandler on SIGUSR1),
stop_early (after a resume exits 0 two steps before the end), ack_early (acknowledges before writing and
prunes every older checkpoint first), noisy (a loss that differs between runs), rounded (restores its
weights through float32, a change the printed loss hides but `--report-state`'s digest shows), no_fsync
(renames its files into place without an fsync: a power loss takes the acknowledged save), frozen_data
(after a resume its saves keep the data position it resumed at, so the second resume replays the data
stream from there), ignore_sigterm (it and its workers ignore SIGTERM),
no_ckpt (never saves), silent (prints no metric lines)."""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib

WIDTH = 1024  # weights: 8 KiB of doubles per rank file
MAGIC = b"QCKP\0\0\0\0"  # 8 bytes: the values that follow are 8-aligned, as most formats keep them
TRACKER = "latest_checkpointed_iteration.txt"
LR = 0.05


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.03)
    p.add_argument("--rank-env", default="RANK", help="the variable a worker's rank is in (LOCAL_RANK: not RANK)")
    p.add_argument("--report-state", action="store_true", help="every rank reports through resilience.job.report")
    p.add_argument("--variant", default="")
    return p.parse_args(argv)


# ---- the launcher (torchrun's part) ------------------------------------------------------------------
def launch(args, argv) -> int:
    """One worker per rank; a barrier between them (each worker sends a byte on its socket, all are answered
    once every one has), as a collective keeps DDP's ranks in step; every worker killed once one fails."""
    if args.variant == "ignore_sigterm":  # the launcher too: a job a scheduler cannot stop but by SIGKILL
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pairs = [socket.socketpair() for _ in range(args.nproc)]
    workers = []
    for r, (_, theirs) in enumerate(pairs):
        fd = theirs.fileno()
        env = {**os.environ, args.rank_env: str(r), "WORLD_SIZE": str(args.nproc), "QUICK_BARRIER_FD": str(fd)}
        workers.append(
            subprocess.Popen([sys.executable, __file__, *argv], env=env, start_new_session=True, pass_fds=[fd])
        )
        theirs.close()
    socks = [mine for mine, _ in pairs]
    waiting: dict[int, int] = {}  # rank -> the value it sent to this barrier
    try:
        while True:
            codes = [w.poll() for w in workers]
            if any(c not in (None, 0) for c in codes):
                return 1
            if all(c == 0 for c in codes):
                return 0
            ready, _, _ = select.select([s for s in socks if s.fileno() >= 0], [], [], 0.01)
            for s in ready:
                got = s.recv(1)
                if not got:
                    s.close()  # that worker ended; its exit status says how
                    continue
                waiting[socks.index(s)] = got[0]
            if len(waiting) == args.nproc:  # every rank is here: each gets the smallest value sent
                answer = bytes([min(waiting.values())])
                for s in socks:
                    s.sendall(answer)
                waiting.clear()
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()


def barrier(value: int = 1) -> int:
    """Wait for every rank; the smallest `value` (0..255) any rank sent, as an all-reduce MIN."""
    s = socket.socket(fileno=int(os.environ["QUICK_BARRIER_FD"]))
    try:
        s.sendall(bytes([value]))
        got = s.recv(1)
        if not got:
            raise SystemExit(1)  # the launcher is gone
        return got[0]
    finally:
        s.detach()


# ---- a worker ----------------------------------------------------------------------------------------
def data(seed: int, step: int) -> list[float]:
    rng = random.Random(seed * 1_000_003 + step)
    return [rng.uniform(-1.0, 1.0) for _ in range(WIDTH)]


def folder(root: str, step: int) -> str:
    return os.path.join(root, f"iter_{step:07d}")


def write_durably(path: str, payload: bytes, sync: bool = True) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(payload)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.rename(tmp, path)
    if not sync:
        return
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode(step: int, w: list[float]) -> bytes:
    body = struct.pack(f"<q{WIDTH}d", step, *w)
    return MAGIC + body + struct.pack("<I", zlib.crc32(body))


def decode(raw: bytes, checked: bool) -> tuple[int, list[float]]:
    size = 8 + 8 * WIDTH
    if raw[:8] != MAGIC or len(raw) < 8 + size:
        raise ValueError(f"not a whole checkpoint file ({len(raw)} bytes)")
    body = raw[8 : 8 + size]
    if checked and (len(raw) != 12 + size or struct.unpack("<I", raw[8 + size :])[0] != zlib.crc32(body)):
        raise ValueError("CRC mismatch")
    values = struct.unpack(f"<q{WIDTH}d", body)
    return values[0], list(values[1:])


def save(args, rank: int, step: int, w: list[float], position: int) -> None:
    """`position`: the data position stored with the weights (the step, unless frozen_data froze it)."""
    path = folder(args.ckpt_dir, step)
    sync = args.variant != "no_fsync"
    if args.variant == "ack_early":
        barrier()
        if rank == 0:  # keep-latest-1 retention run before the save, not after it, and an ack before the bytes
            for name in os.listdir(args.ckpt_dir):
                if name.startswith("iter_"):
                    for f in os.listdir(os.path.join(args.ckpt_dir, name)):
                        os.unlink(os.path.join(args.ckpt_dir, name, f))
                    os.rmdir(os.path.join(args.ckpt_dir, name))
            print(f"saved checkpoint step {step}", flush=True)
        barrier()
    os.makedirs(path, exist_ok=True)
    write_durably(os.path.join(path, f"rank_{rank}.bin"), encode(position, w), sync)
    barrier()  # every rank's file is durable
    if rank == 0:
        write_durably(os.path.join(args.ckpt_dir, TRACKER), f"{step}\n".encode(), sync)
        if args.variant != "ack_early":
            print(f"saved checkpoint step {step}", flush=True)
    barrier()


def candidates(args, rank: int) -> list[int]:
    """Steps to try, newest first: the tracker's, then every older folder (all of them, newest first, when
    the tracker cannot be read)."""
    steps = sorted(
        (int(n[5:]) for n in os.listdir(args.ckpt_dir) if n.startswith("iter_") and n[5:].isdigit()), reverse=True
    )
    try:
        with open(os.path.join(args.ckpt_dir, TRACKER)) as f:
            text = f.read().strip()
    except FileNotFoundError:
        if steps and rank == 0:
            print(f"no tracker {TRACKER}; scanning the folders", flush=True)
        return steps
    if not text.isdigit():
        if rank == 0:
            print(f"tracker {TRACKER} is unreadable ({text!r}); scanning the folders", flush=True)
        return steps
    newest = int(text)
    return [newest] + [s for s in steps if s < newest]


def load(args, rank: int) -> tuple[int, int, list[float]] | None:
    """(the step of the checkpoint loaded, the data position stored in it, the weights), or None."""
    if args.variant == "scratch":
        return None
    checked = args.variant != "unchecked"
    steps = candidates(args, rank)
    while barrier(min(len(steps), 255)) and steps:  # the ranks agree on how many candidates (the tracker's view)
        step = steps.pop(0)
        path = os.path.join(folder(args.ckpt_dir, step), f"rank_{rank}.bin")
        try:
            with open(path, "rb") as f:
                got, w = decode(f.read(), checked)
        except (OSError, ValueError, struct.error) as e:
            if not checked:
                raise
            if args.variant == "refuse":  # no fallback: the error, under a banner, and out
                print(f"rank {rank}: ValueError: {path}: {e}", flush=True)
                print("=" * 60, flush=True)
                raise SystemExit(1) from None
            print(f"rank {rank}: cannot load {path}: {e}; falling back to an older checkpoint", flush=True)
            got = None
        if barrier(got is not None):  # every rank loaded this step: all resume from it
            return step, got, w
    return None


def train(args) -> int:
    rank = int(os.environ[args.rank_env])
    if args.variant == "ignore_sigterm":  # a worker a scheduler cannot stop but by SIGKILL
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    w, start, position = [0.0] * WIDTH, 0, 0
    loaded = load(args, rank)
    if loaded is not None:
        start, position, w = loaded
        if args.variant == "rounded":  # restored through float32: the printed loss cannot tell
            w = [struct.unpack("<f", struct.pack("<f", a))[0] for a in w]
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
        if args.variant.startswith("hang_on_resume"):
            if args.variant == "hang_on_resume_with_stacks":
                faulthandler.register(signal.SIGUSR1)  # a job that asks for its stacks on SIGUSR1
            time.sleep(3600)
    barrier()  # every rank has loaded before any trains (and saves)
    shift = 1 if args.variant == "skip_data" and loaded is not None else position - start
    noise = (os.getpid() % 97) * 1e-3 if args.variant == "noisy" else 0.0
    for step in range(start + 1, args.steps + 1):
        if args.variant == "stop_early" and loaded is not None and step == args.steps - 1:
            return 0
        x = data(args.seed, step + shift)
        loss = sum((a - b) * (a - b) for a, b in zip(w, x)) / WIDTH + noise  # inf, not an error, on a huge weight
        w = [a - LR * 2 * (a - b) for a, b in zip(w, x)]
        if args.report_state:  # the two-line hook: the loss as printed, and a digest of the weights
            import resilience.job

            resilience.job.report(step, loss=round(loss, 6), state=w)
        elif rank == 0 and args.variant != "silent":
            print(f"step {step} loss {loss:.6f}", flush=True)
        time.sleep(args.step_time)
        barrier()  # the ranks keep in step, as DDP's all-reduce keeps them
        if step % args.save_every == 0 and args.variant != "no_ckpt":
            save(args, rank, step, w, position if args.variant == "frozen_data" and loaded else step + shift)
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if "QUICK_BARRIER_FD" not in os.environ:  # not a worker yet
        return launch(args, argv)
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
