"""What a cluster validation run is: its plan, the torchrun environment of a rank, and the
shared folder every node writes its evidence to."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property

from ..errors import ConfigError
from ..faults.base import Fault, fault_from_dict
from ..state import ModelSpec, Topology
from ..vocab.combos import Combination, valid_combinations
from ..vocab.phases import PHASES

PLAN_VERSION = 1
KILL_POLICIES = ("each", "last")
# Iterations of the save phase: two saves that must survive, then one cut by the kill.
TRAIN_BEFORE = (2, 1, 1)
CONTINUE_STEPS = 2

# a corpus saves on these unless told otherwise (here, not in corpus.py: the command line reads them without torch)
DEFAULT_TOPOLOGIES = ("tp2pp1dp1", "tp1pp2dp1", "tp1pp1dp2", "tp2pp1dp2")
DEFAULT_STEPS = 3


def slug(combo: Combination | str) -> str:
    """A folder name for a combination: GLOBAL-torch_dist-async."""
    return str(combo).replace("/", "-")


@dataclass(frozen=True)
class ClusterPlan:
    """The same on every rank and every attempt: which combinations, where the kill strikes, what model.

    kill: "each" cuts the final save of every combination (one torchrun restart per combination);
    "last" only that of the last one (one restart)."""

    # as the plan file writes them; read once, into `combinations`, as the plan is made
    combos: tuple[str, ...] = tuple(str(c) for c in valid_combinations())
    kill: str = "each"
    kill_phase: str = "write"
    kill_rank: int | None = None  # None: the last rank (on the last node)
    tp: int | None = None  # None: 2 when the world is even, else 1
    pp: int = 1
    model: dict = field(default_factory=lambda: ModelSpec(optimizer="distributed").to_dict())
    backend: str = "reference"
    version: int = PLAN_VERSION
    io: str = "seam"  # seam: the kill in process at kill_phase; fuse: by the file system each node mounts
    storage: str = "local"  # local: the shared folder; s3://bucket/prefix: an object store at endpoint_url
    endpoint_url: str | None = None

    def __post_init__(self):
        if not self.combos:
            raise ConfigError("combos", "no combination given", "leave it out for all six")
        # each written one way (InvalidCombination names the layer of a bad one)
        object.__setattr__(self, "combos", tuple(str(c) for c in self.combinations))
        if len(set(self.combos)) != len(self.combos):
            raise ConfigError("combos", "a combination is given twice")
        if self.storage != "local":
            _check_store(self.storage, self.endpoint_url)
        if self.kill not in KILL_POLICIES:
            raise ConfigError("kill", f"unknown policy {self.kill!r}", f"use one of {', '.join(KILL_POLICIES)}")
        if self.kill_phase not in PHASES:
            raise ConfigError("kill_phase", f"unknown phase {self.kill_phase!r}", f"use one of {', '.join(PHASES)}")
        for name in ("tp", "kill_rank"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "tp" else 0)):
                sign = "positive" if name == "tp" else "non-negative"
                raise ConfigError(name, f"must be a {sign} integer, got {v!r}")
        if self.io not in ("seam", "fuse"):
            raise ConfigError("io", f"unknown way {self.io!r}", "use seam or fuse")
        if isinstance(self.pp, bool) or not isinstance(self.pp, int) or self.pp < 1:
            raise ConfigError("pp", f"must be a positive integer, got {self.pp!r}")
        ModelSpec.from_dict(self.model)

    @cached_property
    def combinations(self) -> tuple[Combination, ...]:
        """The plan's combinations, read once from their text (a Combination given is taken as it is)."""
        return tuple(c if isinstance(c, Combination) else Combination.parse(c) for c in self.combos)

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec.from_dict(self.model)

    def killed(self) -> list[Combination]:
        """Combinations whose final save is cut by a kill, in order."""
        return list(self.combinations) if self.kill == "each" else [self.combinations[-1]]

    def restarts_needed(self) -> int:
        return len(self.killed())

    def topology(self, world: int) -> Topology:
        """tp x pp x dp for `world` ranks; ConfigError when it does not divide or the model cannot split."""
        tp = self.tp if self.tp is not None else (2 if world % 2 == 0 else 1)
        if world % (tp * self.pp):
            raise ConfigError(
                "tp/pp",
                f"tp={tp} x pp={self.pp} does not divide the world size {world}",
                "choose tp and pp whose product divides nodes x processes per node",
            )
        topo = Topology(tp, self.pp, world // (tp * self.pp))
        self.spec.check_topology(topo)
        return topo

    def kill_target(self, world: int) -> int:
        rank = world - 1 if self.kill_rank is None else self.kill_rank
        if rank >= world:
            raise ConfigError("kill_rank", f"rank {rank} is out of range for world size {world}", f"use 0..{world - 1}")
        return rank

    def kill_record(self, world: int) -> Fault:
        """The in-process fault: the target rank SIGKILLs itself as the save reaches the phase."""
        return fault_from_dict(
            {"kind": "rank_crash", "target": {"rank": self.kill_target(world)}, "trigger": {"phase": self.kill_phase}},
            world=world,
            where="kill",
        )

    def fuse_kills(self, world: int) -> tuple[list[dict], list[int]]:
        """The kills the file system carries out under io fuse, with the rank operation each is armed at:
        one per killed combination, on the target rank's first file opened for writing once its final save
        begins (the file system cannot hear phases), cut at byte 256. Each is limited to its
        combination's folder and armed at its own number, so it never strikes another combination."""
        records, arms = [], []
        for combo in self.killed():
            records.append(
                {"kind": "rank_crash", "rank": self.kill_target(world), "at_byte": 256, "path": f"*/{slug(combo)}/*"}
            )
            arms.append(self.fuse_arm(combo))
        return records, arms

    def fuse_arm(self, combo: Combination) -> int:
        """The number a rank arms the file system's kill of `combo` with (base.tell "arm")."""
        return self.combinations.index(combo) + 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["combos"] = list(self.combos)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ClusterPlan:
        d = dict(d)
        if d.get("version", PLAN_VERSION) > PLAN_VERSION:
            raise ConfigError(
                "plan.version",
                f"{d['version']} is newer than {PLAN_VERSION}",
                "validate with the same checkpoint-resilience version on every node",
            )
        d["combos"] = tuple(d.get("combos", ()))
        return cls(**d)


def _check_store(storage: str, endpoint_url: str | None) -> None:
    """An object store the ranks of every node can reach: an s3:// URL that parses, and its endpoint."""
    from ..objectstore import S3Location
    from ..objectstore.client import check_endpoint_url

    if storage == "s3":
        raise ConfigError(
            "--storage",
            "s3 is a server started on this machine, which other nodes cannot reach",
            "run with --local, or name the cluster's store: --storage s3://bucket/prefix --endpoint-url URL",
        )
    S3Location.parse(storage)
    if not endpoint_url:
        raise ConfigError("--endpoint-url", f"no endpoint for {storage}", "give --endpoint-url http://host:port")
    check_endpoint_url(endpoint_url)


@dataclass(frozen=True)
class TorchrunEnv:
    """What torchrun tells each worker, read from the environment."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    group_rank: int
    restart_count: int  # this node's count: a node restarted for a membership change does not count it
    max_restarts: int
    run_id: str

    @classmethod
    def from_environ(cls, environ=os.environ) -> TorchrunEnv:
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in environ]
        if missing:
            raise ConfigError(
                "environment",
                f"{', '.join(missing)} not set: this runs under torchrun",
                "start it with torchrun (`resilience validate` prints the command lines)",
            )

        def num(key: str, default: int) -> int:
            try:
                return int(environ.get(key, default))
            except ValueError:
                raise ConfigError(key, f"not an integer: {environ.get(key)!r}") from None

        world = num("WORLD_SIZE", 1)
        return cls(
            num("RANK", 0),
            world,
            num("LOCAL_RANK", 0),
            num("LOCAL_WORLD_SIZE", world),
            num("GROUP_RANK", 0),
            num("TORCHELASTIC_RESTART_COUNT", 0),
            num("TORCHELASTIC_MAX_RESTARTS", 0),
            environ.get("TORCHELASTIC_RUN_ID", ""),
        )


class SharedFolder:
    """The shared folder of one validation run (every node sees the same path)."""

    def __init__(self, shared: str):
        self.root = os.path.abspath(shared)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def plan(self) -> str:
        return self.path("plan.json")

    def ckpt(self, combo: Combination | str) -> str:
        return self.path("ckpt", slug(combo))

    def state(self, combo: Combination | str) -> str:
        return self.path("state", f"{slug(combo)}.json")

    def result(self, combo: Combination | str) -> str:
        return self.path("results", f"{slug(combo)}.json")

    def history(self, rank: int) -> str:
        return self.path("history", f"rank{rank}.jsonl")

    def faults(self, combo: Combination | str, rank: int) -> str:
        return self.path("faults", f"{slug(combo)}.rank{rank}.jsonl")

    def fault_files(self, combo: Combination | str) -> list[str]:
        folder = self.path("faults")
        if not os.path.isdir(folder):
            return []
        pat = re.compile(re.escape(slug(combo)) + r"\.rank\d+\.jsonl")
        return sorted(os.path.join(folder, n) for n in os.listdir(folder) if pat.fullmatch(n))

    # under io fuse: each node mounts the file system over ckpt/ at the same path (a node-local mount)
    def mount(self) -> str:
        return self.path("mnt")

    def fuse_log(self, node: int) -> str:
        return self.path("fuse", f"node{node}")

    def fuse_firings(self, node: int) -> str:
        return self.path("faults", f"fuse.node{node}.jsonl")

    def fuse_firing_files(self) -> list[str]:
        folder = self.path("faults")
        if not os.path.isdir(folder):
            return []
        return sorted(os.path.join(folder, n) for n in os.listdir(folder) if re.fullmatch(r"fuse\.node\d+\.jsonl", n))

    @property
    def summary(self) -> str:
        return self.path("summary.json")

    @property
    def report(self) -> str:
        return self.path("report")

    def create(self) -> None:
        for sub in ("ckpt", "state", "results", "history", "faults", "report"):
            os.makedirs(self.path(sub), exist_ok=True)


def write_json(path: str, obj) -> None:
    """Write durably and atomically (tmp, fsync, rename, fsync the folder): shared storage may be read by
    another node right after, and a kill may follow at once."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: str, default=None):
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)
