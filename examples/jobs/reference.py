"""The reference checkpoint implementation inside a training loop, with Megatron-LM's checkpoint flags, to
run under `resilience job` as a team's job would: each of the seed's six valid combinations becomes a
training job to put under faults.

    torchrun --nproc-per-node 2 examples/jobs/reference.py --ckpt-dir DIR [--steps 12] [--save-every 4]
        [--seed 0] [--ckpt-format torch|torch_dist|torch_dcp] [--async-save]
        [--non-persistent-ckpt-type local] [--tp 2] [--pp 1]

    resilience job --matrix -- python -m torch.distributed.run --nproc-per-node 2 \\
        examples/jobs/reference.py --ckpt-dir {ckpt} --ckpt-format torch_dist --async-save

The flags, mapped to a Combination (resilience.vocab.combos) as Megatron-LM reads them:

    --ckpt-format torch          LEGACY/torch: whole per-rank torch.save files
    --ckpt-format torch_dist     GLOBAL/torch_dist: sharded tensors (Megatron-LM's default, and this one's)
    --ckpt-format torch_dcp      TORCH_DCP/torch_dcp: torch.distributed.checkpoint's layout
    --non-persistent-ckpt-type local
                                 LOCAL/torch: one self-contained folder per rank, no collective; the format
                                 defaults to torch, the only one LOCAL stores
    --async-save                 io async (else sync)
    --use-dist-ckpt              accepted and, as in Megatron-LM, of no effect (--ckpt-format decides)
    --tp, --pp                   tensor and pipeline parallel sizes (--tensor-model-parallel-size,
                                 --pipeline-model-parallel-size); dp is the world size over tp * pp
    --steps, --save-every        also --train-iters, --save-interval
    --seed                       the synthetic model's seed

An invalid combination (LEGACY async, LOCAL torch_dist, ...) or a topology the model cannot be split over
is refused before any process group starts, with the reference's own reason, exit status 2.

The state is the framework's synthetic Megatron-style GPT training state (resilience.state.TrainingState)
for the topology, trained with its own deterministic step (bit-identical on any topology). Its "loss" is
the fingerprint of the whole global state (every parameter, optimizer moment, the iteration, the data
position and every rank's RNG) read as a number in [0, 1): any bit a resume got wrong changes it, and a
run resumed from step N prints the losses of the run that never stopped.

A save (every --save-every steps) goes through resilience.checkpoint.ReferenceBackend: sync, it returns
once committed; async, it returns once staged, the next step trains while it is written, and it is
finalized (waited for and committed) at the end of that step, before the next save and at the end. Only a
committed save is acknowledged. A start loads the newest checkpoint through the reference's verified load,
which falls back past damaged ones and says so; with none loadable the job starts from scratch.

Output (rank 0, flushed): `step N loss X`, `saved checkpoint step N` (once committed), `resumed from step
N`, before it `checkpoint: ...` for each of the load's warnings (a checkpoint passed over and why, an
unreadable tracker), and `no checkpoint in DIR loads (...); starting from scratch`.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal

# torch, and the parts of resilience that need it, are imported once the flags are known to be good: a
# refused combination is said at once
from resilience.errors import CheckpointNotFound
from resilience.state import ModelSpec, Topology
from resilience.vocab import combination

MEGATRON_DEFAULT_FORMAT = "torch_dist"
FORMAT_TYPE = {"torch": "LEGACY", "torch_dist": "GLOBAL", "torch_dcp": "TORCH_DCP"}  # Megatron-LM's reading


def parse(argv=None):
    p = argparse.ArgumentParser(description="The reference checkpoint implementation in a training loop.")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", "--train-iters", dest="steps", type=int, default=12)
    p.add_argument("--save-every", "--save-interval", dest="save_every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-format", choices=sorted(FORMAT_TYPE), default=None, help="default: torch_dist")
    p.add_argument("--async-save", action="store_true")
    p.add_argument("--use-dist-ckpt", action="store_true", help="deprecated, no effect (as in Megatron-LM)")
    p.add_argument("--non-persistent-ckpt-type", choices=["local"], default=None)
    p.add_argument("--tp", "--tensor-model-parallel-size", dest="tp", type=int, default=2)
    p.add_argument("--pp", "--pipeline-model-parallel-size", dest="pp", type=int, default=1)
    args = p.parse_args(argv)
    if args.steps < 1 or args.save_every < 1:
        p.error("--steps and --save-every must be at least 1")
    try:
        args.combo, args.topo, args.spec = settings(args)
    except ValueError as e:  # ConfigError (InvalidCombination among them) is a ValueError
        p.error(str(e))
    return args


def settings(args):
    """(Combination, Topology, ModelSpec) of the flags, or the reference's own ConfigError: decided before
    any process group starts, so a refusal needs no torchrun."""
    local = args.non_persistent_ckpt_type == "local"
    fmt = args.ckpt_format or ("torch" if local else MEGATRON_DEFAULT_FORMAT)
    combo = combination("LOCAL" if local else FORMAT_TYPE[fmt], fmt, "async" if args.async_save else "sync")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.tp < 1 or args.pp < 1 or world % (args.tp * args.pp):
        raise ValueError(
            f"topology: world size {world} is not a multiple of tp*pp = {args.tp}*{args.pp} "
            "(start a multiple of tp*pp ranks, or choose --tp and --pp)"
        )
    topo = Topology(args.tp, args.pp, world // (args.tp * args.pp))
    spec = ModelSpec(seed=args.seed)
    spec.check_topology(topo)
    return combo, topo, spec


def loss_of(state) -> float | None:
    """The fingerprint of the global state as a number in [0, 1) (rank 0; None elsewhere). Collective.
    Only the save stamps are left out, which this job never sets."""
    from resilience.state import GENERATION_PREFIX, combine
    from resilience.state.fingerprints import fingerprint

    digests = fingerprint(state.sharded_state_dict(), dst=0)
    if not digests:
        return None
    return int(combine(digests, (GENERATION_PREFIX,))[:12], 16) / 16**12


def say(rank: int, text: str) -> None:
    if rank == 0:
        print(text, flush=True)


def resume(backend, state, root: str, rank: int):
    """The state loaded from the newest checkpoint that loads, or a fresh one when none does."""
    from resilience.state import TrainingState

    try:
        result = backend.load(state, root)
    except CheckpointNotFound as e:
        if os.listdir(root):
            say(rank, f"no checkpoint in {root} loads ({e}); starting from scratch")
            return TrainingState(state.spec, state.topo, rank, state.groups)  # a failed load may have written
        return state
    for warning in result.warnings:  # every checkpoint passed over, and why (a bad tracker among them)
        say(rank, f"checkpoint: {warning}")
    say(rank, f"resumed from step {result.iteration}")
    return state


class Saver:
    """Saves through the reference and acknowledges each save once it is committed. An async save is
    committed at the end of the step after it: that step trains while it is written (the reference copies
    each tensor before the step changes it), and its acknowledgement comes at the same place in every run."""

    def __init__(self, backend, root: str, rank: int):
        self.backend, self.root, self.rank = backend, root, rank

    def save(self, state) -> None:
        self.finalize()  # the previous async save is committed, and acknowledged, before the next starts
        if self.backend.format.layout == "local":
            self.save_local(state)
        else:
            self.backend.save(state, self.root)
        if not self.backend.combo.is_async:
            say(self.rank, f"saved checkpoint step {state.iteration}")

    def save_local(self, state) -> None:
        """A LOCAL save: each rank commits its own folder with no collective, and a load takes only a
        checkpoint every rank holds, so it is one only once every rank has committed its part; the ranks
        agree before rank 0 says so, and a failure on any rank fails the job on every rank."""
        from resilience.dist import all_agree

        error = None
        try:
            self.backend.save(state, self.root)
        except Exception as e:
            error = e
        if not all_agree(error is None):
            raise error or RuntimeError(f"another rank's LOCAL save of step {state.iteration} failed")

    def after_step(self, state) -> None:
        pending = self.backend.in_flight_iteration
        if pending is not None and state.iteration > pending:
            self.finalize()

    def finalize(self) -> None:
        """Wait for the async save in flight, if any, and commit it (a failed write raises here)."""
        pending = self.backend.in_flight_iteration
        if pending is not None:
            self.backend.finalize()
            say(self.rank, f"saved checkpoint step {pending}")


def main(argv=None) -> None:
    args = parse(argv)
    import torch
    import torch.distributed as dist

    from resilience.checkpoint import ReferenceBackend
    from resilience.state import TrainingState

    # the load's warnings are printed from its result, all of them once (the log has only some)
    logging.getLogger("resilience.checkpoint").addHandler(logging.NullHandler())
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # every thread's stack, for a hang's report
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    root = os.path.abspath(args.ckpt_dir)
    if rank == 0:
        os.makedirs(root, exist_ok=True)
    dist.barrier()
    if args.use_dist_ckpt:
        say(rank, "--use-dist-ckpt is deprecated and has no effect. Use --ckpt-format to select the checkpoint format.")
    say(rank, f"checkpointing {args.combo} on {args.topo}")
    backend = ReferenceBackend(args.combo)
    state = resume(backend, TrainingState(args.spec, args.topo, rank), root, rank)
    saver = Saver(backend, root, rank)
    for step in range(state.iteration + 1, args.steps + 1):
        state.step()
        loss = loss_of(state)
        if loss is not None:
            print(f"step {step} loss {loss:.12f}", flush=True)
        saver.after_step(state)
        if step % args.save_every == 0:
            saver.save(state)
    saver.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
