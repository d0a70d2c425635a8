"""`resilience validate`: prove on the cluster itself that checkpoints survive a killed rank and torchrun's
restart. Prints the torchrun command line of every node; --local runs two node agents on loopback here;
--show prints the summary of a finished run from its shared folder."""

from __future__ import annotations

import os
import shlex
import sys

from .common import nonnegative_int, positive_int, seconds


def register(sub) -> None:
    from ..cluster.worker import DEFAULT_TIMEOUT, add_plan_arguments

    p = sub.add_parser(
        "validate",
        help="validate a cluster: train, save, a rank kills itself mid-save, torchrun "
        "restarts the group, which resumes from the newest valid checkpoint; "
        "prints what to run on each node (--local: runs it here)",
    )
    p.add_argument(
        "--shared",
        help="a folder every node sees at the same path, empty for each run (--local: "
        "default a new folder under --out)",
    )
    p.add_argument(
        "--out",
        help="or: where to make the shared folder, a new run folder under OUT as every "
        "command makes one (--local: default runs/); on a cluster, OUT must be seen by "
        "every node at the same path",
    )
    p.add_argument("--nnodes", type=positive_int, help="number of nodes (--local: default 2)")
    p.add_argument("--nproc-per-node", type=positive_int, help="rank processes per node (--local: default 2)")
    p.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="the first node's address and a free port: it serves the c10d rendezvous (--local: loopback)",
    )
    p.add_argument("--rdzv-id", help="a name for this run, the same on every node (default: generated)")
    p.add_argument("--max-restarts", type=nonnegative_int, help="torchrun restarts (default: one per planned kill)")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds a collective may wait for the other ranks (default: {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--local", action="store_true", help="run the node agents here, on 127.0.0.1, and report")
    p.add_argument(
        "--run-timeout",
        type=seconds,
        default=900.0,
        help="--local: stop everything after this many seconds (default: 900)",
    )
    p.add_argument("--show", metavar="SHARED", help="print the summary of a finished run and exit with its status")
    add_plan_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..cluster import SharedFolder
    from ..cluster.verdicts import read_summary, render_summary
    from ..cluster.worker import plan_from_args
    from ..errors import ConfigError

    if args.show:
        summary = read_summary(SharedFolder(args.show))
        if summary is None:
            raise ConfigError(
                "show",
                f"{args.show} holds no finished validation (no summary.json)",
                "wait for the last attempt to end, or read its node logs",
            )
        print(render_summary(summary, SharedFolder(args.show).root))
        return summary["exit_status"]
    if args.local and args.storage == "s3":  # a server here, for the node agents here
        return _with_embedded_store(args)
    plan = plan_from_args(args)
    if args.shared and args.out:
        raise ConfigError(
            "--out", "given with --shared", "give --shared (that folder) or --out (a new folder under it), not both"
        )
    if args.local:
        return _run_local(args, plan)
    if not (args.shared or args.out) or not args.nnodes or not args.nproc_per_node or not args.rdzv_endpoint:
        raise ConfigError(
            "validate",
            "to print the command lines it needs --shared (or --out), --nnodes, --nproc-per-node and --rdzv-endpoint",
            "or use --local to run two node agents here",
        )
    if not args.shared:
        from ..report import make_run_dir

        args.shared = make_run_dir(args.out, "validate")
    print(instructions(args, plan))
    return 0


def _commands(args, plan, *, shared: str, nnodes: int, nproc: int, endpoint: str, rdzv_id: str, torchrun=None):
    from ..cluster.nodes import torchrun_commands

    return torchrun_commands(
        plan,
        shared=shared,
        nnodes=nnodes,
        nproc_per_node=nproc,
        rdzv_endpoint=endpoint,
        rdzv_id=rdzv_id,
        max_restarts=args.max_restarts,
        timeout=args.timeout,
        torchrun=torchrun,
        one_machine=args.local,
    )


def instructions(args, plan) -> str:
    from ..cluster.nodes import new_run_id
    from ..cluster.worker import STORE_FIX

    rdzv_id = args.rdzv_id or new_run_id()
    cmds = _commands(
        args,
        plan,
        shared=args.shared,
        nnodes=args.nnodes,
        nproc=args.nproc_per_node,
        endpoint=args.rdzv_endpoint,
        rdzv_id=rdzv_id,
    )
    world = args.nnodes * args.nproc_per_node
    host = args.rdzv_endpoint.rpartition(":")[0]
    shared = os.path.abspath(args.shared)
    lines = [
        f"Cluster validation {rdzv_id}: {args.nnodes} nodes x {args.nproc_per_node} ranks = world {world} as "
        f"{plan.topology(world)}; {len(plan.combos)} combination(s); kill: {plan.kill} at phase {plan.kill_phase} "
        f"on rank {plan.kill_target(world)}; {cmds[0].argv[cmds[0].argv.index('--max-restarts') + 1]} torchrun "
        f"restarts.",
        "",
        "Before: install the same checkpoint-resilience and torch on every node; make "
        f"{shared} an empty folder that every node sees at that path; {host} must be reachable from every node.",
        "",
        "Run at the same time, one line per node:",
    ]
    for c in cmds:
        role = f" (serves the rendezvous at {args.rdzv_endpoint})" if c.node_rank == 0 else ""
        lines += ["", f"# node {c.node_rank}{role}", c.shell()]
    template = cmds[0].shell().replace("--node-rank 0", "--node-rank $NODE_RANK")
    for per_node in (os.path.join("logs", "node0"), os.path.join("fuse", "node0"), "fuse.node0.jsonl"):
        template = template.replace(per_node, per_node.replace("node0", "node$NODE_RANK"))
    lines += [
        "",
        "Under a scheduler, the same line on every node, e.g. with Slurm (one task per node):",
        f"  srun --nodes {args.nnodes} --ntasks-per-node 1 bash -c "
        f"{shlex.quote(template.replace('$NODE_RANK', '$SLURM_NODEID'))}",
        "",
        f"{STORE_FIX}=1 gives each attempt a fresh store: torch 2.13 otherwise keeps the addresses of the "
        "killed attempt and the restarted gloo group cannot connect. If gloo picks the wrong network "
        "interface, set GLOO_SOCKET_IFNAME too.",
        "",
        f"The last attempt prints a summary; rank 0 writes it to {os.path.join(shared, 'summary.json')} and a "
        f"report (results.json, report.md, report.html, junit.xml) to {os.path.join(shared, 'report')}. Exit "
        f"status is 0 only if every combination passed. Afterwards: resilience validate --show {shlex.quote(shared)}",
    ]
    return "\n".join(lines)


def _replay() -> str:
    """The `resilience validate --local` line that runs this again, into a new shared folder (the one given
    is not empty any more)."""
    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip or a == "--shared" or a.startswith("--shared="):
            skip = a == "--shared"
            continue
        argv.append(a)
    return "resilience " + " ".join(shlex.quote(a) for a in argv) if argv else "resilience validate --local"


def _with_embedded_store(args) -> int:
    """validate --local --storage s3: an S3 server on this machine for the run, a bucket for it, stopped at the
    end with nothing left; the ranks reach it as they would a cluster's (s3://validate/RUN at its endpoint)."""
    from ..cluster.nodes import new_run_id
    from ..cluster.worker import plan_from_args
    from ..objectstore.server import ACCESS_KEY, REGION, SECRET_KEY, EmbeddedS3

    args.rdzv_id = args.rdzv_id or new_run_id()
    with EmbeddedS3() as server:
        server.bucket("validate")
        args.storage, args.endpoint_url = f"s3://validate/{args.rdzv_id}", server.endpoint
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
        os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION)
        try:
            return _run_local(args, plan_from_args(args))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _run_local(args, plan) -> int:
    from ..cluster import SharedFolder
    from ..cluster.nodes import free_port, new_run_id, run_local, this_python_torchrun
    from ..cluster.verdicts import read_summary, render_summary
    from ..cluster.worker import REPLAY_ENV
    from ..report import make_run_dir
    from ..report.folder import make_folder

    nnodes, nproc = args.nnodes or 2, args.nproc_per_node or 2
    # the shared folder, made and proven writable before any agent starts
    shared = os.path.abspath(
        make_folder(args.shared, "--shared") if args.shared else make_run_dir(args.out or "runs", "validate")
    )
    endpoint = args.rdzv_endpoint or f"127.0.0.1:{free_port()}"
    rdzv_id = args.rdzv_id or new_run_id()
    cmds = _commands(
        args,
        plan,
        shared=shared,
        nnodes=nnodes,
        nproc=nproc,
        endpoint=endpoint,
        rdzv_id=rdzv_id,
        torchrun=this_python_torchrun(),
    )
    print(
        f"validate --local: {nnodes} torchrun node agents x {nproc} ranks on loopback, rendezvous {endpoint}; "
        f"shared folder {shared}",
        flush=True,
    )
    for c in cmds:
        print(f"  node {c.node_rank}: {c.shell()}", flush=True)
        c.env[REPLAY_ENV] = _replay()
    outcome = run_local(
        cmds, timeout=args.run_timeout, log_dir=os.path.join(shared, "logs"), tmp_dir=os.path.join(shared, "tmp")
    )
    summary = read_summary(SharedFolder(shared))
    print(
        f"agents exited with {outcome.exit_codes} after {outcome.seconds:.1f} s"
        + (f"; stopped at the --run-timeout of {args.run_timeout:g} s" if outcome.timed_out else "")
    )
    if summary is None:
        print(f"no summary: the run did not finish; node logs: {', '.join(outcome.logs)}", file=sys.stderr)
        return 1
    print(render_summary(summary, shared))
    return 0 if outcome.ok and summary["exit_status"] == 0 else 1
