"""A CPU training job in the Megatron-LM style: a tiny GPT from megatron-core's own transformer layers
(`GPTModel`, the local layer spec, no Transformer Engine), tensor parallel over every rank on gloo, and
`megatron.core.dist_checkpointing`, to run under `resilience job` as a team's job would.

    torchrun --nproc-per-node 2 examples/jobs/megatron_core.py --ckpt-dir DIR [--steps 12] [--save-every 4]
        [--seed 0] [--async-save]

    resilience job --matrix -- python -m torch.distributed.run --nproc-per-node 2 \\
        examples/jobs/megatron_core.py --ckpt-dir {ckpt}

Tensor parallel size is the world size (2 under the command above; data parallel 1): attention heads,
MLP and the vocabulary-parallel embedding and output layer are split between the ranks, which see the
same batch, drawn from (seed, step, data-parallel rank). AdamW under megatron-core's
OptimizerParamScheduler (warm-up, cosine decay); no dropout. A resumed run prints the losses of the run
that never stopped.

A save (every --save-every steps), as Megatron-LM lays it out: `dist_checkpointing.save` (torch_dist) of
{model: GPTModel.sharded_state_dict(), optimizer: AdamW's state as sharded tensors the way megatron's
FP32Optimizer.sharded_state_dict makes them, opt_param_scheduler, iteration, and each rank's SHA-256 of
its tensors as a ShardedObject} into DIR/iter_NNNNNNN (each rank's `__R_T.distcp` shards, common.pt,
metadata.json last). Then rank 0 fsyncs the folder's files and the folder, replaces
latest_checkpointed_iteration.txt durably (temporary name, fsync, rename) and prints `saved checkpoint
step N`. Megatron-LM writes its tracker with a plain open() and no fsync, and dist_checkpointing keeps no
checksum: the rest is this job's own care. With --async-save it is `save(..., async_sharded_save=True)`
scheduled on an AsyncCallsQueue: a forked process writes while training goes on, each step polls the
queue, and the tracker and the acknowledgement are the request's last finalize function. A folder left by
an earlier run at the step about to be saved is removed first.

A load reads the tracker (an unreadable or missing one is said, and the folders holding a metadata.json
are scanned, newest first), `dist_checkpointing.load`s into a freshly built model and optimizer and checks
the digests; if any rank cannot, each such rank says why and every rank falls back to the next older
folder; `resumed from step N` (rank 0).

What needed CUDA on megatron-core 0.16.1 (torch CPU build, where every CUDA call raises
`AssertionError: Torch not compiled with CUDA enabled`), and what this job does instead:
- `tensor_parallel.model_parallel_cuda_manual_seed` (torch.cuda.get_rng_state): the RNG tracker is made
  with `initialize_rng_tracker(inference_rng_tracker=True)`, whose fork of the CUDA RNG is a no-op;
  dropout is 0, so nothing draws from it;
- DotProductAttention's scratch buffer (`get_global_memory_buffer`), dist_checkpointing's failure and
  async-finalize all-reduces and megatron's DistributedDataParallel grad buffers are allocated on
  `torch.cuda.current_device()`, and the torch_dist writer's host copy (sync and async saves) and the
  async scheduling end with `torch.cuda.synchronize()`: both are pointed at the CPU (`cpu_fallbacks`);
- the default causal mask (`get_default_causal_mask`) is built with device="cuda": the job passes its own;
- MegatronOptimizer: `get_megatron_optimizer` builds an FP32Optimizer, whose constructor makes
  `torch.tensor([1.0], device='cuda')` (its loss scale; the DistributedOptimizer's mixed-precision base
  does the same): AdamW from torch instead, its state sharded with megatron's
  `dist_checkpointing.optimizer` helpers. With data parallel 1 no DistributedDataParallel is needed;
- AsyncCallsQueue(persistent=True): its worker calls torch.cuda.set_device(rank % device_count()),
  ZeroDivisionError; the default queue (a forked process per save) works.

Output (rank 0, flushed): `step N loss X` (6 decimals), `saved checkpoint step N`, `resumed from step N`.
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import hashlib
import itertools
import os
import re
import shutil
import signal
import warnings

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed": the local spec needs neither
    from megatron.core import dist_checkpointing, parallel_state, tensor_parallel
    from megatron.core.dist_checkpointing import ShardedObject, ShardedTensor
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.optimizer import (
        get_param_id_to_sharded_param_map,
        optim_state_to_sharding_state,
    )
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer import TransformerConfig

warnings.filterwarnings("ignore", message="When using async grad allreduce")  # a CUDA tuning hint
warnings.filterwarnings("ignore", message="full scope is deprecated")  # TransformerConfig's own default
for said in ("`load_state_dict` is deprecated", "Please use DTensor instead"):  # megatron's torch_dist load
    warnings.filterwarnings("ignore", message=said, category=FutureWarning)

VOCAB, SEQ, BATCH = 64, 16, 8
DECAY_STEPS = 24  # Megatron-LM's --lr-decay-iters: fixed, so a shorter run is a prefix of a longer one
TRACKER = "latest_checkpointed_iteration.txt"
ITER_DIR = re.compile(r"iter_(\d{7})$")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--async-save", action="store_true")
    # Megatron-LM's own switch: megatron-core writes through multi-storage-client whenever it is installed
    # (its default profile: a temporary file renamed into place); this job writes plain files unless --msc
    p.add_argument("--msc", action="store_true", help="write through multi-storage-client when it is installed")
    return p.parse_args()


def cpu_fallbacks() -> None:
    """megatron-core places scratch tensors on torch.cuda.current_device() and synchronizes the device
    after its host copies; this job runs on the CPU, where both would raise."""
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    torch.cuda.synchronize = lambda *args, **kwargs: None


def batch(seed: int, step: int, dp_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of an affine recurrence mod VOCAB from random starts: learnable, and the same for every
    tensor-parallel rank of a data-parallel rank."""
    g = torch.Generator().manual_seed(seed * 100_003 + step * 1_009 + dp_rank)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    tokens = (start * 5 ** torch.arange(SEQ + 1) + 3 * torch.arange(SEQ + 1)) % VOCAB
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


class Trainer:
    """Model, optimizer and schedule, built the same on every run; their state as megatron shards it."""

    def __init__(self, args):
        torch.manual_seed(args.seed)
        tp = parallel_state.get_tensor_model_parallel_world_size()
        config = TransformerConfig(
            num_layers=2,
            hidden_size=32,
            ffn_hidden_size=64,
            num_attention_heads=4,
            tensor_model_parallel_size=tp,
            use_cpu_initialization=True,  # the whole weight drawn from the CPU RNG, then split: same for any tp
            hidden_dropout=0.0,
            attention_dropout=0.0,
            params_dtype=torch.float32,
        )
        self.model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=SEQ)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=0.0, betas=(0.9, 0.95), weight_decay=0.01)
        self.sched = OptimizerParamScheduler(
            self.optim,
            init_lr=0.002,
            max_lr=0.02,
            min_lr=0.001,
            lr_warmup_steps=3,
            lr_decay_steps=DECAY_STEPS,
            lr_decay_style="cosine",
            start_wd=0.01,
            end_wd=0.01,
            wd_incr_steps=DECAY_STEPS,
            wd_incr_style="constant",
        )
        self.mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1)[None, None]
        self.positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, -1)

    def train_step(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = self.model(tokens, self.positions, self.mask, labels=labels).mean()  # per-token losses, tp-reduced
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        self.sched.step(increment=1)
        return loss.detach()

    def init_optim_state(self) -> None:
        """AdamW makes its state on the first step; a load needs it to load into (FP32Optimizer's init_state_fn)."""
        for p in self.model.parameters():
            if not self.optim.state[p]:
                self.optim.state[p] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(p.data),
                    "exp_avg_sq": torch.zeros_like(p.data),
                }

    def sharded_state_dict(self, step: int) -> dict:
        model_sd = self.model.sharded_state_dict()
        optim_sd = self.optim.state_dict()
        params = itertools.chain.from_iterable(g["params"] for g in self.optim.param_groups)
        step_tensors = [s["step"] for s in optim_sd["state"].values()]
        id_to_param = get_param_id_to_sharded_param_map(model_sd, params)
        optim_state_to_sharding_state(optim_sd, id_to_param, exclude_keys=("step",))
        if step_tensors:
            optim_sd["state"]["common_step"] = step_tensors[0]  # one step for every parameter, as FP32Optimizer
        sd = {
            "model": model_sd,
            "optimizer": optim_sd,
            "opt_param_scheduler": self.sched.state_dict(),
            "iteration": step,
            "checkpoint_version": 3.0,
        }
        rank, world = dist.get_rank(), dist.get_world_size()
        sd["sha256"] = ShardedObject("sha256", digest(sd), (world,), (rank,), replica_id=0)
        return sd

    def load_state_dict(self, loaded: dict) -> None:
        self.model.load_state_dict(loaded["model"])
        optim = copy.copy(loaded["optimizer"])
        state = dict(optim["state"])
        step = state.pop("common_step", None)
        for s in state.values():
            s["step"] = step.clone()
        self.optim.load_state_dict({"state": state, "param_groups": optim["param_groups"]})
        self.sched.load_state_dict(loaded["opt_param_scheduler"])


def digest(sd: dict) -> str:
    """SHA-256 of this rank's tensors in a sharded state dict (replicas included), by key."""
    h = hashlib.sha256()
    for t in sorted((v for v in nested_values(sd) if isinstance(v, ShardedTensor)), key=lambda v: v.key):
        data = t.data.detach().contiguous()
        h.update(
            f"{t.key}{data.dtype}{tuple(data.shape)}".encode() + data.reshape(-1).view(torch.uint8).numpy().tobytes()
        )
    return h.hexdigest()


def folder(root: str, step: int) -> str:
    return os.path.join(root, f"iter_{step:07d}")


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def complete_steps(root: str) -> list[int]:
    """The iter folders whose save finished (metadata.json, written last), newest first."""
    found = (ITER_DIR.match(n) for n in os.listdir(root))
    steps = (int(m.group(1)) for m in found if m)
    return sorted((s for s in steps if os.path.exists(os.path.join(folder(root, s), "metadata.json"))), reverse=True)


def candidates(root: str) -> list[int]:
    """The tracker's step and the finished folders older than it; every finished folder when the tracker
    cannot be read."""
    steps = complete_steps(root)
    try:
        with open(os.path.join(root, TRACKER)) as f:
            text = f.read().strip()
    except FileNotFoundError:
        text = None
    if text is not None and text.isdigit():
        return [int(text)] + [s for s in steps if s < int(text)]
    if steps and dist.get_rank() == 0:
        said = "missing" if text is None else f"unreadable ({text!r})"
        print(f"tracker {TRACKER} is {said}; scanning the iter folders", flush=True)
    return steps


def why_not(e: BaseException) -> str:
    """One line for a failed load: DCP's CheckpointException carries each failing rank's exception."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        return "; ".join(
            f"rank {r}: {why_not(f[0] if isinstance(f, tuple) else f)}" for r, f in sorted(failures.items())
        )
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def try_load(args, step: int) -> tuple[Trainer, str]:
    """A fresh trainer with the checkpoint of step loaded and checked, or why it could not be."""
    trainer = Trainer(args)
    trainer.init_optim_state()
    path = folder(args.ckpt_dir, step)
    try:
        sd = trainer.sharded_state_dict(step)
        loaded = dist_checkpointing.load(sd, path)
        trainer.load_state_dict(loaded)
        if int(loaded["iteration"]) != step:
            return trainer, f"{path} holds iteration {loaded['iteration']}"
        if digest(trainer.sharded_state_dict(step)) != loaded["sha256"]:
            return trainer, f"{path}: SHA-256 mismatch of rank {dist.get_rank()}'s tensors"
        return trainer, ""
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - a checkpoint that does not load is a fallback, said out loud
        return trainer, f"{path}: {why_not(e)}"


def load(args) -> tuple[Trainer, int]:
    """Resume from the newest checkpoint every rank can load; a fresh trainer at step 0 when none can."""
    steps = candidates(args.ckpt_dir) if os.path.isdir(args.ckpt_dir) else []
    for step in steps:
        trainer, why = try_load(args, step)
        whys: list[str] = [""] * dist.get_world_size()
        dist.all_gather_object(whys, why)  # every rank resumes from the same step
        if not any(whys):
            return trainer, step
        if dist.get_rank() == 0:
            said = " / ".join(sorted({w for w in whys if w}))
            print(f"cannot load iteration {step} ({said}); falling back to an older checkpoint", flush=True)
    if steps and dist.get_rank() == 0:
        print(f"no checkpoint in {args.ckpt_dir} loads; starting from scratch", flush=True)
    return Trainer(args), 0


class Saver:
    """Saves, and acknowledges once the save and the tracker are on disk."""

    def __init__(self, root: str, asynchronous: bool):
        self.root, self.rank = root, dist.get_rank()
        self.queue = AsyncCallsQueue() if asynchronous else None

    def save(self, step: int, trainer: Trainer) -> None:
        self.wait()
        path = folder(self.root, step)
        if self.rank == 0:
            if os.path.exists(path):
                shutil.rmtree(path)  # an earlier run's folder at this step: no stale metadata.json over new shards
            os.makedirs(path)
        dist.barrier()
        sd = trainer.sharded_state_dict(step)
        if self.queue is None:
            dist_checkpointing.save(sd, path)
            self.commit(step)
        else:
            request = dist_checkpointing.save(sd, path, async_sharded_save=True)
            request.finalize_fns.append(lambda: self.commit(step))  # after megatron's own metadata.json
            self.queue.schedule_async_request(request)

    def poll(self) -> None:
        """Finalize an async save that has finished, without waiting (every rank calls it at the same step)."""
        if self.queue is not None:
            self.queue.maybe_finalize_async_calls(blocking=False)

    def wait(self) -> None:
        if self.queue is not None:
            self.queue.maybe_finalize_async_calls(blocking=True)

    def commit(self, step: int) -> None:
        """Every rank's shards are written (dist_checkpointing ends a save with a barrier): rank 0 makes
        the folder durable, then points the tracker at it."""
        if self.rank != 0:
            return
        path = folder(self.root, step)
        for name in os.listdir(path):
            fsync_path(os.path.join(path, name))
        fsync_path(path)
        tracker = os.path.join(self.root, TRACKER)
        with open(tracker + ".tmp", "w") as f:
            f.write(f"{step}\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tracker + ".tmp", tracker)
        fsync_path(self.root)
        print(f"saved checkpoint step {step}", flush=True)

    def close(self) -> None:
        if self.queue is not None:
            self.queue.maybe_finalize_async_calls(blocking=True)
            self.queue.close()


def main() -> None:
    args = parse()
    if not args.msc:
        from megatron.core.msc_utils import MultiStorageClientFeature

        MultiStorageClientFeature.disable()  # what Megatron-LM's --disable-msc does
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung run's stacks, on request
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo")
    cpu_fallbacks()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=dist.get_world_size())
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True)
    rank = dist.get_rank()
    os.makedirs(args.ckpt_dir, exist_ok=True)
    trainer, start = load(args)
    if start and rank == 0:
        print(f"resumed from step {start}", flush=True)
    saver = Saver(args.ckpt_dir, args.async_save)
    dp_rank = parallel_state.get_data_parallel_rank()
    for step in range(start + 1, args.steps + 1):
        loss = trainer.train_step(*batch(args.seed, step, dp_rank))
        dist.all_reduce(loss, group=parallel_state.get_data_parallel_group())
        if rank == 0:
            print(f"step {step} loss {loss.item() / parallel_state.get_data_parallel_world_size():.6f}", flush=True)
        saver.poll()
        if step % args.save_every == 0:
            saver.save(step, trainer)
    saver.close()
    dist.barrier()  # no rank tears gloo down while another still talks to it
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
