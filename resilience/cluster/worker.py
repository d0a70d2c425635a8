"""The rank side of a cluster validation, started by torchrun on every node:

    torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id ID \\
        --max-restarts R -m resilience.cluster.worker --shared /shared/path [options]

Reads RANK / WORLD_SIZE / TORCHELASTIC_RESTART_COUNT from torchrun, joins the gloo group through env://
and runs one attempt (resilience.cluster.program). Exit status 0 once every combination passed, 1 when any
did not (or results are still missing), 2 on a configuration error."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from datetime import timedelta

from ..errors import ConfigError, ResilienceError
from ..launch.lifetime import die_with_parent
from ..state import ModelSpec
from ..vocab.phases import PHASES
from .spec import KILL_POLICIES, ClusterPlan, SharedFolder, TorchrunEnv

DEFAULT_TIMEOUT = 300.0
STORE_FIX = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
REPLAY_ENV = "RESILIENCE_REPLAY"  # set by `resilience validate --local`: the line its report gives as the replay


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """The options that make a ClusterPlan (shared by the worker and `resilience validate`)."""
    g = p.add_argument_group("what to validate")
    g.add_argument(
        "--combos", nargs="+", metavar="TYPE/format/io", help="combinations to validate (default: all six valid ones)"
    )
    g.add_argument(
        "--kill",
        choices=KILL_POLICIES,
        default="each",
        help="each: cut the final save of every combination by a kill, one torchrun restart each; "
        "last: only the last combination's, one restart (default: each)",
    )
    g.add_argument(
        "--kill-phase",
        choices=PHASES,
        default="write",
        help="the phase of the save at which the rank kills itself (default: write)",
    )
    g.add_argument("--kill-rank", type=int, help="the rank that kills itself (default: the last rank)")
    g.add_argument("--tp", type=int, help="tensor parallel size (default: 2 when the world is even, else 1)")
    g.add_argument("--pp", type=int, default=1, help="pipeline parallel size (default: 1); dp is the rest")
    g.add_argument(
        "--hidden",
        type=int,
        default=32,
        help="hidden size of the model (default: 32; raise it to push more bytes through the shared storage)",
    )
    g.add_argument("--layers", type=int, default=4, help="number of layers (default: 4)")
    g.add_argument(
        "--optimizer",
        choices=("adam", "distributed"),
        default="distributed",
        help="Adam state sharded like its parameter, or split over dp (default: distributed)",
    )
    g.add_argument("--backend", default="reference", help="'reference' or package.module:factory")
    g.add_argument(
        "--io",
        choices=("seam", "fuse", "auto"),
        default="auto",
        help="how the kill reaches the save: seam (the rank kills itself at --kill-phase, in process), "
        "fuse (a fault-injecting file system each node mounts kills the rank's writer at a byte "
        "of its first file of the save: every writer, forked or not) or auto (default: the seam "
        "for the reference, the file system for other backends)",
    )
    g.add_argument(
        "--storage",
        default="local",
        metavar="WHERE",
        help="where the checkpoints go: local (the shared folder) or s3://bucket/prefix at --endpoint-url, "
        "credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with --local: s3, a server started "
        "here); default: local",
    )
    g.add_argument("--endpoint-url", default=None, metavar="URL", help="the S3 endpoint of --storage s3://...")


def plan_from_args(args: argparse.Namespace) -> ClusterPlan:
    from ..runner.adapters import resolve_backend
    from ..runner.io_route import resolve
    from ..vocab.combos import valid_combinations

    backend = resolve_backend(args.backend)  # once: its combinations and its I/O route
    # the plan holds them as its file writes them, and reads them once (ClusterPlan.combinations)
    if args.combos:
        combos = tuple(args.combos)
    else:  # a backend that declares its combinations is validated on those
        combos = tuple(str(c) for c in backend.combinations() or valid_combinations())
    spec = ModelSpec(num_layers=args.layers, hidden=args.hidden, ffn_hidden=2 * args.hidden, optimizer=args.optimizer)
    return ClusterPlan(
        combos,
        args.kill,
        args.kill_phase,
        args.kill_rank,
        args.tp,
        args.pp,
        spec.to_dict(),
        args.backend,
        io=resolve(args.io, backend),
        storage=args.storage,
        endpoint_url=args.endpoint_url,
    )


def plan_argv(plan: ClusterPlan) -> list[str]:
    """Worker options that rebuild `plan` (the inverse of plan_from_args)."""
    spec = plan.spec
    out = ["--combos", *plan.combos, "--kill", plan.kill, "--kill-phase", plan.kill_phase]
    if plan.kill_rank is not None:
        out += ["--kill-rank", str(plan.kill_rank)]
    if plan.tp is not None:
        out += ["--tp", str(plan.tp)]
    if plan.pp != 1:
        out += ["--pp", str(plan.pp)]
    if spec.hidden != 32:
        out += ["--hidden", str(spec.hidden)]
    if spec.num_layers != 4:
        out += ["--layers", str(spec.num_layers)]
    if spec.optimizer != "distributed":
        out += ["--optimizer", spec.optimizer]
    if plan.backend != "reference":
        out += ["--backend", plan.backend]
    out += ["--io", plan.io]
    if plan.storage != "local":
        out += ["--storage", plan.storage] + (["--endpoint-url", plan.endpoint_url] if plan.endpoint_url else [])
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m resilience.cluster.worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--shared",
        required=True,
        help="a folder every node sees at the same path: checkpoints, history, results and the summary go there",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds a collective may wait for the other ranks (default: {DEFAULT_TIMEOUT:g})",
    )
    add_plan_arguments(p)
    return p


def check_restart_store(env: TorchrunEnv, environ=os.environ) -> None:
    """torch 2.13's c10d rendezvous hands its own TCPStore to the workers and keeps it across restarts, with
    no per-attempt prefix: after a restart gloo reads the addresses of the dead attempt and cannot connect.
    A fresh store per attempt (hosted by rank 0) avoids it."""
    if env.max_restarts > 0 and environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise ConfigError(
            "environment",
            "torchrun shares its rendezvous store with the workers, so a restarted "
            "gloo group would connect to the ranks of the failed attempt",
            f"set {STORE_FIX}=1 for torchrun on every node",
        )


def main(argv: list[str] | None = None) -> int:
    # torchrun starts workers in sessions of their own: without this a SIGKILLed agent leaves them running.
    # (No parent check: torchrun may be a container's PID 1.)
    die_with_parent(None)
    args = build_parser().parse_args(argv)
    import torch.distributed as dist

    try:
        plan = plan_from_args(args)
        env = TorchrunEnv.from_environ()
        check_restart_store(env)
        plan.topology(env.world)
    except ResilienceError as e:
        print(f"resilience.cluster.worker: error: {e}", file=sys.stderr, flush=True)
        return 2
    from .program import run_attempt

    # the command a person reruns: `resilience validate --local ...` when that started the agents, else this one
    command = os.environ.get(REPLAY_ENV) or " ".join(
        shlex.quote(a) for a in ["python", "-m", "resilience.cluster.worker", *sys.argv[1:]]
    )
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    try:
        return run_attempt(env, plan, SharedFolder(args.shared), command=command)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
