"""The golden run: the command twice without a fault, through the same mount every case runs under.
Its metric curve is the reference every case of the run is compared with, kept in the run folder
(golden/curve.json, with the layout of its checkpoints in golden/layout.json) and reused by every case,
and by a later run given `--golden DIR`.

Run twice to tell whether the job is deterministic: when the two curves differ, the first step where
they do is named and the run stops unless --rtol says how far apart two runs of this job may be. What
makes a job unusable here is refused before any case runs, each with one error naming the thing and the
fix: a command that fails on its own, output that no metric pattern matches (its first lines are
shown), a job that never writes to its checkpoint folder."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from ..errors import ConfigError
from .base import Golden, Observed, RunOutcome
from .command import JobCommand
from .layout import JobLayout, learn_job_layout
from .patterns import BUILT_IN, Patterns
from .process import FS_LOG, run_once

GOLDEN = "golden"
CURVE, LAYOUT = "curve.json", "layout.json"
GOLDEN_RUNS = 2
SHOWN_LINES = 12  # of the job's output, in an error about it
_CHANGES = ("create", "mkdir", "write", "rename", "exchange", "unlink", "rmdir", "truncate", "link", "symlink")


@dataclass(frozen=True)
class Reference:
    """The golden curve and the layout the cases aim at."""

    golden: Golden
    layout: JobLayout
    folder: str

    def save(self) -> None:
        with open(os.path.join(self.folder, CURVE), "w", encoding="utf-8") as f:
            json.dump(self.golden.to_dict(), f, indent=1)
        self.layout.save(os.path.join(self.folder, LAYOUT))

    @classmethod
    def load(cls, folder: str) -> Reference:
        """A golden run kept by an earlier run (its golden/ folder, or the run folder holding it)."""
        if os.path.isdir(os.path.join(folder, GOLDEN)):
            folder = os.path.join(folder, GOLDEN)
        try:
            with open(os.path.join(folder, CURVE), encoding="utf-8") as f:
                golden = Golden.from_dict(json.load(f))
            layout = JobLayout.load(os.path.join(folder, LAYOUT))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(
                "--golden", f"{folder} holds no golden run that can be read ({e})", "give the golden/ folder of a run"
            ) from None
        return cls(golden, layout, folder)


def golden_run(
    command: JobCommand, patterns: Patterns, folder: str, *, timeout: float, rtol: float = 0.0, on_run=None
) -> Reference:
    """The command run GOLDEN_RUNS times without faults in `folder`, compared, and its reference saved."""
    os.makedirs(folder, exist_ok=True)
    runs: list[RunOutcome] = []
    for k in range(GOLDEN_RUNS):
        here = os.path.join(folder, f"run-{k + 1}")
        mountpoint = command.ckpt_dir or os.path.join(here, "ckpt")
        run = run_once(
            command,
            index=k + 1,
            folder=here,
            backing=os.path.join(here, "disk"),
            mountpoint=mountpoint,
            patterns=patterns,
            timeout=timeout,
        )
        _refuse_unusable(run, command, patterns, mountpoint, timeout)
        runs.append(run)
        if on_run is not None:
            on_run(run)
    first = runs[0].observed
    _compare(first, [r.observed for r in runs[1:]], rtol)
    _compare_states(first, [r.observed for r in runs[1:]])
    acks = tuple(a.step for a in first.acks)
    newest = acks[-1] if acks else _newest_number(os.path.join(runs[0].folder, "disk"))
    layout = learn_job_layout(os.path.join(runs[0].folder, "disk"), os.path.join(runs[0].folder, FS_LOG), newest)
    golden = Golden(
        first.curve(), acks, first.last_step or 0, rtol, tuple(r.seconds for r in runs), first.digests(), command.nodes
    )
    ref = Reference(golden, layout, folder)
    ref.save()
    return ref


def _refuse_unusable(run: RunOutcome, command: JobCommand, patterns: Patterns, mountpoint: str, timeout: float) -> None:
    obs = run.observed
    if run.timed_out:
        raise ConfigError(
            "--timeout",
            f"the golden run of {command.name} did not end within {timeout:g} s; its last lines:\n{_lines(obs.tail)}",
            "give a longer --golden-timeout, or fewer steps",
        )
    if run.exit_code != 0:
        raise ConfigError(
            "command",
            f"{command.shell()} failed on its own, without a fault ({run.ended()}); its first lines:\n"
            f"{_lines(obs.head)}",
            "run it by hand first: it must train to its last step and exit 0",
        )
    if not obs.points:
        kind = (
            f"--metric {'; '.join(p.pattern for p in patterns.metric)}"
            if "metric" in patterns.given
            else f"any built-in metric pattern ({BUILT_IN})"
        )
        raise ConfigError(
            "--metric",
            f"no line of the golden run matches {kind}; its first lines:\n{_lines(obs.head)}",
            "give --metric REGEX with named groups step and loss, e.g. " + r"'it (?P<step>\d+) .* (?P<loss>[\d.]+)'",
        )
    from ..faults.fuse_log import read_log

    if not any(e.get("op") in _CHANGES for e in read_log(os.path.join(run.folder, FS_LOG))):
        raise ConfigError(
            "--ckpt-dir",
            f"{command.name} never wrote to its checkpoint folder {mountpoint} in the golden run",
            "put {ckpt} in the command where it takes its checkpoint folder (e.g. --save {ckpt}), read "
            "RESILIENCE_CKPT_DIR, or name the folder it writes to with --ckpt-dir PATH",
        )


def _compare(first: Observed, others: list[Observed], rtol: float) -> None:
    """Refuse a job whose golden runs differ beyond rtol, naming the first step where they do."""
    want = first.curve()
    for k, other in enumerate(others, start=2):
        got = other.curve()
        for step in sorted(set(want) | set(got)):
            a, b = want.get(step), got.get(step)
            if a is not None and b is not None and _close(a, b, rtol):
                continue
            where = f"step {step}: loss {_show(a)} in golden run 1, {_show(b)} in golden run {k}"
            if rtol:
                raise ConfigError(
                    "--rtol",
                    f"the job's golden runs differ by more than --rtol {rtol:g} ({where})",
                    "give a larger --rtol",
                )
            raise ConfigError(
                "--rtol",
                f"the job is not deterministic: two runs without a fault differ ({where})",
                "make it deterministic (seeds, torch.use_deterministic_algorithms, a fixed data order) or give "
                "--rtol R, how far apart two runs of it may be",
            )


def _compare_states(first: Observed, others: list[Observed]) -> None:
    """Refuse a job whose golden runs report different states (resilience.job.report) at one step."""
    want = first.digests()
    for k, other in enumerate(others, start=2):
        for key, got in sorted(other.digests().items()):
            if key in want and want[key] != got:
                raise ConfigError(
                    "state",
                    f"the job is not deterministic: two runs without a fault report different states at step "
                    f"{key[0]} on rank {key[1]} (resilience.job.report: {want[key][:12]} in golden run 1, "
                    f"{got[:12]} in golden run {k})",
                    "make it deterministic (seeds, torch.use_deterministic_algorithms, a fixed data order), or "
                    "report no state",
                )


def _close(a: float, b: float, rtol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or (rtol > 0 and math.isclose(a, b, rel_tol=rtol, abs_tol=0.0))


def _newest_number(backing: str) -> int:
    """Without acknowledgements: the largest number in the names at the top of the checkpoint folder."""
    import re

    found = [int(n) for name in os.listdir(backing) for n in re.findall(r"\d+", name)] if os.path.isdir(backing) else []
    return max(found, default=0)


def _show(v: float | None) -> str:
    return "(none)" if v is None else f"{v!r}"


def _lines(lines: list[str]) -> str:
    shown = lines[:SHOWN_LINES]
    return "\n".join(f"    {line}" for line in shown) if shown else "    (it printed nothing)"


__all__ = ["GOLDEN", "Reference", "golden_run"]
