"""The team's command as given after `--`, and where its checkpoints go.

`{ckpt}` anywhere in an argument is replaced by the case's checkpoint folder, which is also exported as
RESILIENCE_CKPT_DIR. A job that hard-codes its folder names it with `--ckpt-dir PATH`: the mount is then
made at PATH itself (what was there stays untouched underneath, hidden while a run is mounted), so PATH
must be an existing folder outside the run folder.

With `--nodes N` every run starts the command N times, as N nodes of one job on this machine: each is given
torchrun's own environment for it (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR=127.0.0.1 and a free
PET_MASTER_PORT of that run), and `{node}`, `{nnodes}` and `{port}` in an argument are replaced by them, for a
launcher that takes them as flags. All nodes share the one checkpoint folder, as nodes share a file system."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass

from ..errors import ConfigError

PLACEHOLDER = "{ckpt}"
CKPT_ENV = "RESILIENCE_CKPT_DIR"  # the case's checkpoint folder, for jobs that read it from the environment
RANK_ENV = "RANK,LOCAL_RANK"  # a caller's rank: torchrun's RANK, else LOCAL_RANK (a launcher that sets only it)
RUN_ENV = "RESILIENCE_JOB_RUN"  # a token of one run in every process it starts: how its strays are found
NODE_ENV = "RESILIENCE_NODE_RANK"  # the node a process belongs to, with --nodes
MAX_NODES = 8
# torchrun's flags that --nodes sets for each node: a command that fixes them makes every node the same one
_NODE_FLAGS = {
    "--nnodes": "{nnodes}",
    "--node-rank": "{node}",
    "--node_rank": "{node}",
    "--master-port": "{port}",
    "--master_port": "{port}",
}


@dataclass(frozen=True)
class JobCommand:
    """The command line (with its `{ckpt}`), the folder it hard-codes (None: the runner picks one per case),
    and the folder it runs in."""

    argv: tuple[str, ...]
    ckpt_dir: str | None = None
    cwd: str = "."
    nodes: int = 1
    max_restarts: int | None = None  # torchrun's own restarts (PET_MAX_RESTARTS), with --restarts-by torchrun

    @classmethod
    def parse(
        cls, argv: list[str], *, ckpt_dir: str | None = None, out: str | None = None, nodes: int = 1
    ) -> JobCommand:
        """The command after `--`, checked: it names a program that exists, and a --ckpt-dir is an existing
        folder that neither holds nor lies inside the run folder `out`. One ConfigError otherwise."""
        if not argv:
            raise ConfigError(
                "command", "no command after --", "e.g. resilience job -- torchrun train.py --ckpt {ckpt}"
            )
        program = argv[0]
        if shutil.which(program) is None and not (os.sep in program and os.access(program, os.X_OK)):
            raise ConfigError(
                "command",
                f"cannot start {program!r}: no such program on PATH",
                "give the program's path, or install it (is the virtual environment active?)",
            )
        folder = None
        if ckpt_dir is not None:
            folder = os.path.abspath(ckpt_dir)
            if not os.path.isdir(folder):
                what = "does not exist" if not os.path.lexists(folder) else "is not a folder"
                raise ConfigError(
                    "--ckpt-dir", f"{ckpt_dir} {what}", "give the folder the job writes its checkpoints to"
                )
            if out is not None and _overlap(folder, os.path.abspath(out)):
                raise ConfigError(
                    "--ckpt-dir",
                    f"{ckpt_dir} and the run folder {out} overlap",
                    "keep the job's checkpoint folder outside --out (the mount would hide the run's own files)",
                )
        if nodes > 1:
            _check_node_flags(argv, nodes)
        return cls(tuple(argv), folder, os.getcwd(), nodes)

    @property
    def name(self) -> str:
        """A short name: the script it runs (the first argument ending in .py), else the program."""
        for arg in self.argv:
            if arg.endswith(".py"):
                return os.path.basename(arg)
        return os.path.basename(self.argv[0])

    @property
    def is_torchrun(self) -> bool:
        """Whether the command starts torchrun (`torchrun ...`, `python -m torch.distributed.run ...`, either
        after `env VAR=value ...`)."""
        argv = list(self.argv)
        if argv and os.path.basename(argv[0]) == "env":
            argv = argv[1:]
        while argv and "=" in argv[0] and not argv[0].startswith("-"):
            argv = argv[1:]
        head = argv[:3]
        return bool(head) and (os.path.basename(head[0]) == "torchrun" or "torch.distributed.run" in head)

    @property
    def uses_placeholder(self) -> bool:
        return any(PLACEHOLDER in a for a in self.argv)

    def resolved(self, ckpt: str, node: int = 0, port: int = 0) -> list[str]:
        """The argv with `{ckpt}` replaced by the checkpoint folder `ckpt` (and `{node}`, `{nnodes}`, `{port}`
        by the node's rank, the number of nodes and the run's port)."""
        values = {PLACEHOLDER: ckpt, "{node}": str(node), "{nnodes}": str(self.nodes), "{port}": str(port)}
        out = []
        for a in self.argv:
            for key, value in values.items():
                a = a.replace(key, value)
            out.append(a)
        return out

    def env(self, ckpt: str, token: str, temp: str | None = None, node: int = 0, port: int = 0) -> dict[str, str]:
        env = dict(os.environ)
        env[CKPT_ENV] = ckpt
        env[RUN_ENV] = token
        if self.nodes > 1:  # torchrun reads a flag it is not given from PET_<FLAG>
            env |= {"PET_NNODES": str(self.nodes), "PET_NODE_RANK": str(node), "PET_MASTER_ADDR": "127.0.0.1"}
            env |= {"PET_MASTER_PORT": str(port), NODE_ENV: str(node)}
        if self.max_restarts is not None:  # a --max-restarts in the command itself wins over it
            env["PET_MAX_RESTARTS"] = str(self.max_restarts)
        if temp is not None:  # torchrun's own folder (torchelastic_*) too, which a killed agent leaves
            env["TMPDIR"] = temp
        env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the runner as they are printed
        return env

    def shell(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)


def _check_node_flags(argv: list[str], nodes: int) -> None:
    """A command for --nodes leaves torchrun's node flags to the runner, or writes them as placeholders."""
    if nodes > MAX_NODES:
        raise ConfigError("--nodes", f"{nodes} nodes on one machine", f"give at most {MAX_NODES}")
    if "--standalone" in argv:
        raise ConfigError(
            "command",
            "--standalone makes each node a job of its own",
            "leave it out with --nodes: the runner joins them",
        )
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in _NODE_FLAGS:
            continue
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        want = _NODE_FLAGS[flag]
        if value != want and not (flag == "--nnodes" and value == str(nodes)):
            raise ConfigError(
                "command",
                f"{flag} {value} would make every node the same one",
                f"leave {flag} out with --nodes (torchrun takes it from the runner), or write {flag} {want}",
            )


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip(os.sep) or os.sep, b.rstrip(os.sep) or os.sep
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


__all__ = ["CKPT_ENV", "MAX_NODES", "NODE_ENV", "PLACEHOLDER", "RUN_ENV", "JobCommand"]
