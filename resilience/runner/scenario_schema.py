"""What a scenario file may say: its fields, the step kinds, the limits on every value, the rules for
names, and the error that lists every problem of a file with its line and field."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from ..launch.outcomes import MAX_JOB_TIMEOUT

STEP_KINDS = {
    "train": "train N steps (1 <= N <= 10000)",
    "save": "save a checkpoint with the combination's IO mode",
    "finalize": "commit an async save in flight",
    "recover": "right after a save (or finalize) a fault makes raise: the same ranks go on, load, train a step, "
    "save, finalize and load that save back (a fault that poisons later saves is a recovery FAIL)",
    "crash": "a rank kills itself during the next save: {rank, phase} or {rank, after_bytes, file}",
    "fault": "an in-process fault record: {kind, ...} (see resilience.faults)",
    "kill": "the runner SIGKILLs ranks during the next save: {rank, file, size} or {rank, after: seconds} "
    "(also written {rank, when: {file, size}} or {rank, when: {after: seconds}})",
    "corrupt": "damage the newest checkpoint at rest: {kind, file, ...}, or a list of such damages",
    "lose_unsynced": "record file operations from here on; at the power loss (a phase, at_byte, or the job's "
    "end) check every on-disk state it could leave: {phase, max_states}",
    "resume": "start a new job on a topology and load the newest valid checkpoint: {topology, continue, precision, "
    "stagger: seconds every rank but rank 0 starts late}",
    "verify": "a marker: checkers always run at the end",
}
TOP_FIELDS = {
    "name",
    "description",
    "seed",
    "model",
    "topology",
    "combinations",
    "steps",
    "expect",
    "timeout",
    "backend",
    "tags",
    "io",
    "storage",
}
EXPECT_FIELDS = {"loaded_iteration", "outcome"}
OUTCOMES = ("loaded", "refused", "failed")
RESUME_FIELDS = {"topology", "continue", "precision", "stagger"}

# Limits (documented in README.md, "Scenarios"); the YAML itself is bounded by resilience.safe_yaml.
MAX_TIMEOUT = MAX_JOB_TIMEOUT  # seconds a job may take (the launcher's ceiling); also of every delay a fault waits
MAX_TRAIN_STEPS = 10_000  # steps of one `train` or of one resume's `continue`
MAX_STEPS = 500  # steps listed in one scenario
MAX_DAMAGES = 8  # damages listed in one `corrupt` step
MAX_STAGGER = 10.0  # seconds a resumed job's ranks but rank 0 start late
MAX_SEED = 2**63  # seeds are in [0, 2**63)
MAX_NAME = 80  # characters of a name; names are folder names: [A-Za-z0-9_.-], no '..'
MAX_DESCRIPTION = 10_000
MAX_TAGS, MAX_TAG = 32, 40
MAX_POWER_LOSS_STATES = 1024  # crash states one lose_unsynced may build
MAX_FILE_BYTES = 64 << 20  # bytes a fault may write (extra_file length)
MAX_COUNT = 1 << 40  # any other count or byte position in a fault record
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
TAG_RE = re.compile(r"[A-Za-z0-9_.:-]+")
_OPTIONS = r"[A-Za-z_]\w*=[\w.+-]+(?:,[A-Za-z_]\w*=[\w.+-]+)*"  # backend options: name=value,...
BACKEND_RE = re.compile(
    rf"reference|broken:[A-Za-z0-9_.-]+|[A-Za-z0-9_-]+(?::{_OPTIONS})?|"
    rf"[A-Za-z_][\w.]*:[A-Za-z_]\w*(?:\[{_OPTIONS}\])?|[A-Za-z0-9_-]+\[{_OPTIONS}\]"
)
UNNAMED = "unnamed"


@dataclass(frozen=True)
class ScenarioProblem:
    """One problem of a scenario file: its line (None: the whole file), the field and what is allowed."""

    line: int | None
    field: str
    problem: str
    allowed: str = ""

    def text(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: {self.field}: {self.problem}" + (f" ({self.allowed})" if self.allowed else "")


class ScenarioError(ConfigError):
    """A scenario file that cannot run. Lists every problem found, sorted by line, each naming the file,
    line and field, and what is allowed; `problems` holds them, `line` is the first one's."""

    def __init__(
        self,
        source: str,
        line: int | None = None,
        field: str = "",
        problem: str = "",
        allowed: str = "",
        problems: list[ScenarioProblem] | None = None,
    ):
        items = list(problems) if problems else [ScenarioProblem(line, field, problem, allowed)]
        items.sort(key=lambda p: p.line or 0)
        first = items[0]
        if len(items) == 1:
            where = f"{source}:{first.line}" if first.line else source
            super().__init__(f"{where}: {first.field}", first.problem, first.allowed)
        else:
            super().__init__(source, f"{len(items)} problems:\n" + "\n".join("  " + p.text(source) for p in items))
        self.source, self.line, self.problems = source, first.line, items

    def __reduce__(self):
        return type(self), (self.source, None, "", "", "", self.problems)


def safe_name(text: str) -> str:
    """A name usable as a folder name, made from any text (a file's stem): runs of characters outside
    [A-Za-z0-9_.-] become '-', '..' becomes '.', leading dots and dashes go, at most MAX_NAME characters."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)
    out = re.sub(r"\.{2,}", ".", out).lstrip(".-")[:MAX_NAME].rstrip("-")
    return out or "scenario"


def name_problem(name) -> str | None:
    """Why `name` cannot name a scenario (it becomes part of folder names), or None."""
    if not isinstance(name, str):
        return f"must be a string, got {name!r}"
    if not NAME_RE.fullmatch(name) or ".." in name or len(name) > MAX_NAME:
        return (
            f"{name[:100]!r} is not a safe folder name: use 1-{MAX_NAME} characters of A-Z a-z 0-9 _ . -, "
            "not starting with '.' or '-', without '..'"
        )
    return None
