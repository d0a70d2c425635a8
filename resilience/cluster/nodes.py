"""The torchrun command line of each node, and two (or more) node agents run on loopback for a local try.

Every node runs the same line but for --node-rank; the node named in --rdzv-endpoint serves the c10d
rendezvous. (With c10d torchrun assigns node ranks itself and only warns about --node-rank; it is printed
so each line says which node it is for, and so the lines still work with the static backend.)"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import psutil

from ..errors import ConfigError
from ..launch.lifetime import argv_dying_with_parent
from .spec import ClusterPlan, SharedFolder
from .worker import DEFAULT_TIMEOUT, STORE_FIX, plan_argv

STOP_GRACE = 15.0  # seconds between SIGTERM to an agent (which stops its workers) and SIGKILL of what is left


@dataclass
class NodeCommand:
    """What to run on one node: environment and argv."""

    node_rank: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + " ".join(shlex.quote(a) for a in self.argv)


def parse_endpoint(text: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("rdzv_endpoint", f"cannot read {text!r}", "write it as HOST:PORT, e.g. node0:29500")
    return host, int(port)


def new_run_id() -> str:
    return f"resilience-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def torchrun_commands(
    plan: ClusterPlan,
    *,
    shared: str,
    nnodes: int,
    nproc_per_node: int,
    rdzv_endpoint: str,
    rdzv_id: str,
    max_restarts: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    torchrun: list[str] | None = None,
    logs: bool = True,
    one_machine: bool = False,
) -> list[NodeCommand]:
    """One command per node. max_restarts defaults to what the plan needs (one per planned kill). Under io
    fuse each node's torchrun runs under the file system's node wrapper, all mounted at the same path
    (rank 0 may hand every rank a path it made); `one_machine` (every node agent on this machine, as
    validate --local runs them): node 0 mounts it, the others use that mount."""
    for name, v in (("nnodes", nnodes), ("nproc_per_node", nproc_per_node)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(name, f"must be a positive integer, got {v!r}")
    parse_endpoint(rdzv_endpoint)
    plan.topology(nnodes * nproc_per_node)  # the world must split into the plan's tp x pp x dp
    plan.kill_target(nnodes * nproc_per_node)
    restarts = plan.restarts_needed() if max_restarts is None else max_restarts
    if restarts < plan.restarts_needed():
        raise ConfigError(
            "max_restarts",
            f"{restarts} is fewer than the {plan.restarts_needed()} planned kills",
            f"use --max-restarts {plan.restarts_needed()} or --kill last",
        )
    shared = os.path.abspath(shared)
    out = []
    for node in range(nnodes):
        argv = list(torchrun or ["torchrun"]) + [
            "--nnodes",
            str(nnodes),
            "--nproc-per-node",
            str(nproc_per_node),
            "--node-rank",
            str(node),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            rdzv_endpoint,
            "--rdzv-id",
            rdzv_id,
            "--max-restarts",
            str(restarts),
        ]
        if logs:
            argv += ["--log-dir", os.path.join(shared, "logs", f"node{node}"), "--tee", "3"]
        argv += ["-m", "resilience.cluster.worker", "--shared", shared]
        if timeout != DEFAULT_TIMEOUT:
            argv += ["--timeout", f"{timeout:g}"]
        argv += plan_argv(plan)
        env = {STORE_FIX: "1"}
        if plan.io == "fuse" and (node == 0 or not one_machine):
            argv = fuse_wrapped(argv, plan, SharedFolder(shared), node, nnodes * nproc_per_node, torchrun)
        elif plan.io == "fuse":
            from ..fusefs.node import MOUNT_ENV

            env[MOUNT_ENV] = SharedFolder(shared).mount()
        out.append(NodeCommand(node, argv, env))
    return out


def fuse_wrapped(
    argv: list[str], plan: ClusterPlan, shared_folder: SharedFolder, node: int, world: int, torchrun: list[str] | None
) -> list[str]:
    """The node's torchrun line run under resilience.fusefs.node: the fault-injecting file system mounted
    over the shared checkpoint folder at this node's mount point for as long as torchrun runs."""
    records, arms = plan.fuse_kills(world)
    python = torchrun[:1] if torchrun else ["python"]  # this_python_torchrun starts with this interpreter
    return (
        python
        + [
            "-m",
            "resilience.fusefs.node",
            "--backing",
            shared_folder.path("ckpt"),
            "--mountpoint",
            shared_folder.mount(),
            "--log",
            shared_folder.fuse_log(node),
            "--report",
            shared_folder.fuse_firings(node),
            "--faults",
            json.dumps(records),
            "--arm-at",
            json.dumps(arms),
            "--",
        ]
        + argv
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class LocalOutcome:
    exit_codes: list[int | None]
    seconds: float
    timed_out: bool
    logs: list[str]

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(c == 0 for c in self.exit_codes)


def run_local(
    commands: list[NodeCommand], *, timeout: float, log_dir: str, tmp_dir: str | None = None, on_start=None
) -> LocalOutcome:
    """Run every node's command on this machine at once; each agent's output goes to log_dir/node{i}.log.
    Bounded by `timeout`; afterwards no agent or worker of ours is left running."""
    os.makedirs(log_dir, exist_ok=True)
    env = dict(os.environ)
    if tmp_dir:  # whatever torchrun or torch put in the temp folder stays inside the run's folder
        os.makedirs(tmp_dir, exist_ok=True)
        env["TMPDIR"] = tmp_dir
    procs: list[subprocess.Popen] = []
    logs = [os.path.join(log_dir, f"node{c.node_rank}.log") for c in commands]
    start = time.monotonic()
    timed_out = False
    try:
        for c, path in zip(commands, logs):
            with open(path, "wb") as log:
                # the agent dies with us, even SIGKILLed (it runs in a session of its own)
                procs.append(
                    subprocess.Popen(
                        argv_dying_with_parent(c.argv),
                        env={**env, **c.env},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        if on_start is not None:
            on_start(procs)
        for p in procs:
            left = timeout - (time.monotonic() - start)
            try:
                p.wait(timeout=max(0.0, left))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        stop(procs)
    return LocalOutcome([p.returncode for p in procs], time.monotonic() - start, timed_out, logs)


def stop(procs: list[subprocess.Popen], grace: float = STOP_GRACE) -> None:
    """Stop agents and every worker they started (workers run in sessions of their own); reap them."""
    tree = _signal_groups(procs, signal.SIGTERM)  # torchrun forwards it: workers get their own SIGTERM
    end = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    tree += _signal_groups(procs, signal.SIGKILL)
    for proc in tree:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(tree, timeout=5)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _signal_groups(procs: list[subprocess.Popen], sig: int) -> list[psutil.Process]:
    """Send `sig` to the process group of each agent still running; the descendants found first."""
    tree: list[psutil.Process] = []
    for p in procs:
        if p.poll() is None:
            try:
                tree += psutil.Process(p.pid).children(recursive=True)
            except psutil.Error:
                pass
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
    return tree


def this_python_torchrun() -> list[str]:
    """torchrun of the interpreter running this, whatever is first on PATH."""
    return [sys.executable, "-m", "torch.distributed.run"]
