"""The team's command as given after `--`, and where its checkpoints go.

`{ckpt}` anywhere in an argument is replaced by the case's checkpoint folder, which is also exported as
RESILIENCE_CKPT_DIR. A job that hard-codes its folder names it with `--ckpt-dir PATH`: the mount is then
made at PATH itself (what was there stays untouched underneath, hidden while a run is mounted), so PATH
must be an existing folder outside the run folder."""

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


@dataclass(frozen=True)
class JobCommand:
    """The command line (with its `{ckpt}`), the folder it hard-codes (None: the runner picks one per case),
    and the folder it runs in."""

    argv: tuple[str, ...]
    ckpt_dir: str | None = None
    cwd: str = "."

    @classmethod
    def parse(cls, argv: list[str], *, ckpt_dir: str | None = None, out: str | None = None) -> JobCommand:
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
        return cls(tuple(argv), folder, os.getcwd())

    @property
    def name(self) -> str:
        """A short name: the script it runs (the first argument ending in .py), else the program."""
        for arg in self.argv:
            if arg.endswith(".py"):
                return os.path.basename(arg)
        return os.path.basename(self.argv[0])

    @property
    def uses_placeholder(self) -> bool:
        return any(PLACEHOLDER in a for a in self.argv)

    def resolved(self, ckpt: str) -> list[str]:
        """The argv with `{ckpt}` replaced by the checkpoint folder `ckpt`."""
        return [a.replace(PLACEHOLDER, ckpt) for a in self.argv]

    def env(self, ckpt: str, token: str, temp: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env[CKPT_ENV] = ckpt
        env[RUN_ENV] = token
        if temp is not None:  # torchrun's own folder (torchelastic_*) too, which a killed agent leaves
            env["TMPDIR"] = temp
        env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the runner as they are printed
        return env

    def shell(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip(os.sep) or os.sep, b.rstrip(os.sep) or os.sep
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


__all__ = ["CKPT_ENV", "PLACEHOLDER", "RUN_ENV", "JobCommand"]
