"""A scenario as the runner takes it (Scenario, Step), and its plain-data and YAML form (to_dict,
to_yaml: what a case folder's scenario.yaml and a shrunk failure's file hold)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import yaml

from ..faults import Fault
from ..state import ModelSpec, Topology
from ..vocab.combos import Combination, valid_combinations


@dataclass
class Step:
    """One step as the file wrote it (`args`, written back by to_dict) and, for a fault step, the fault
    record it stands for, read and checked once as the file was loaded."""

    kind: str
    args: dict
    line: int | None = None
    fault: Fault | None = None

    def to_dict(self) -> dict:
        if self.kind == "train":
            return {"train": self.args["steps"]}
        return {self.kind: self.args or None}


@dataclass
class Scenario:
    name: str
    steps: list[Step]
    model: ModelSpec = field(default_factory=ModelSpec)
    topology: Topology = field(default_factory=Topology)
    combinations: list[Combination] = field(default_factory=valid_combinations)
    seed: int = 0
    description: str = ""
    expect: dict = field(default_factory=dict)
    timeout: float = 120.0
    backend: str = "reference"
    tags: list[str] = field(default_factory=list)
    source: str = "<scenario>"
    io: str = "auto"  # how in-process faults reach the backend: seam, fuse or auto (runner.io_route)
    storage: str = "local"  # where checkpoints go: local, s3 or s3://bucket/prefix (objectstore.store)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "model": self.model.to_dict(),
            "topology": str(self.topology),
            "combinations": [str(c) for c in self.combinations],
            "steps": [s.to_dict() for s in self.steps],
            "expect": self.expect,
            "timeout": self.timeout,
            "backend": self.backend,
            "tags": self.tags,
            **({"io": self.io} if self.io != "auto" else {}),
            **({"storage": self.storage} if self.storage != "local" else {}),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def as_run(self, combo: Combination, backend: str | None = None) -> Scenario:
        """This scenario as one case ran it: that combination only, and the backend that was tested (what a
        case folder's scenario.yaml records, so it replays alone)."""
        return replace(self, combinations=[combo], backend=backend or self.backend)
