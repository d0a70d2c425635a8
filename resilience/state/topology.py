"""Parallel layout of a job: tensor, pipeline and data parallel sizes, in Megatron's rank order."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from .precision import Precision

MAX_WORLD = 64  # rank processes on one machine; beyond this a laptop or CI box only thrashes


@dataclass(frozen=True)
class Coords:
    """Where one rank sits: its tensor, pipeline and data parallel ranks."""

    rank: int
    tp: int
    pp: int
    dp: int


@dataclass(frozen=True)
class Topology:
    """tp x pp x dp ranks. Rank order is Megatron's: tp fastest, then dp, then pp."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    def __post_init__(self):
        for field in ("tp", "pp", "dp"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"topology.{field}", f"must be a positive integer, got {value!r}")
            if value < 1:
                raise ConfigError(f"topology.{field}", f"must be at least 1, got {value}")
        if self.world > MAX_WORLD:
            raise ConfigError(
                "topology", f"world size tp*pp*dp = {self.world} is larger than {MAX_WORLD}", "use smaller tp, pp or dp"
            )

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def __str__(self) -> str:
        return f"tp{self.tp}pp{self.pp}dp{self.dp}"

    @classmethod
    def parse(cls, text: str) -> Topology:
        """'tp2pp1dp4' or '2,1,4' (tp, pp, dp)."""
        text = str(text).strip().lower()
        m = re.fullmatch(r"tp(\d+)pp(\d+)dp(\d+)", text) or re.fullmatch(r"(\d+),(\d+),(\d+)", text)
        if not m:
            raise ConfigError("topology", f"cannot read {text!r}", "write it as tp2pp1dp4 or 2,1,4")
        return cls(*(int(g) for g in m.groups()))

    def coords(self, rank: int) -> Coords:
        if not 0 <= rank < self.world:
            raise ConfigError("rank", f"{rank} is outside world size {self.world} of {self}")
        tp = rank % self.tp
        dp = (rank // self.tp) % self.dp
        pp = rank // (self.tp * self.dp)
        return Coords(rank, tp, pp, dp)

    def rank_of(self, tp: int, pp: int, dp: int) -> int:
        return tp + self.tp * (dp + self.dp * pp)

    def all_coords(self) -> list[Coords]:
        return [self.coords(r) for r in range(self.world)]

    # Groups: lists of global ranks that share every coordinate but one.
    def tp_groups(self) -> list[list[int]]:
        return [[self.rank_of(t, p, d) for t in range(self.tp)] for p in range(self.pp) for d in range(self.dp)]

    def dp_groups(self) -> list[list[int]]:
        return [[self.rank_of(t, p, d) for d in range(self.dp)] for p in range(self.pp) for t in range(self.tp)]

    def pp_groups(self) -> list[list[int]]:
        return [[self.rank_of(t, p, d) for p in range(self.pp)] for d in range(self.dp) for t in range(self.tp)]

    def to_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp}

    @classmethod
    def from_dict(cls, d: dict) -> Topology:
        return cls(int(d["tp"]), int(d["pp"]), int(d["dp"]))


@dataclass(frozen=True)
class Transition:
    """Topology at save -> topology at load, and optionally the precision on each side
    ('tp1pp1dp2:bf16->tp1pp1dp2:fp32', 'tp1pp1dp2:fp32->tp1pp1dp2:fp32+optim_bf16': a resume that changes
    the parameters' or the optimizer state's dtype; state/precision.py)."""

    save: Topology
    load: Topology
    save_precision: Precision | None = None
    load_precision: Precision | None = None

    def __str__(self) -> str:
        def side(topo: Topology, precision: Precision | None) -> str:
            return f"{topo}:{precision}" if precision else str(topo)

        return f"{side(self.save, self.save_precision)}->{side(self.load, self.load_precision)}"

    @property
    def changed(self) -> tuple[str, ...]:
        """The parallel sizes that change (a change of precision is `precision_changed`)."""
        return tuple(f for f in ("tp", "pp", "dp") if getattr(self.save, f) != getattr(self.load, f))

    @property
    def precision_changed(self) -> bool:
        return self.save_precision != self.load_precision

    @classmethod
    def parse(cls, text: str) -> Transition:
        if "->" not in str(text):
            raise ConfigError(
                "transition",
                f"cannot read {text!r}",
                "write it as tp2pp1dp1->tp1pp1dp2 (or tp1pp1dp1:fp32->tp1pp1dp1:bf16)",
            )
        sides = [_side(part, str(text)) for part in str(text).split("->", 1)]
        (save, save_precision), (load, load_precision) = sides
        if (save_precision is None) != (load_precision is None):
            raise ConfigError(
                "transition",
                f"{text!r} gives a precision on one side only",
                "give both, as tp1pp1dp1:fp32->tp1pp1dp1:bf16 or tp1pp1dp1:fp32->tp1pp1dp1:fp32+optim_bf16",
            )
        return cls(save, load, save_precision, load_precision)


def _side(text: str, whole: str) -> tuple[Topology, Precision | None]:
    topo, colon, precision = text.strip().partition(":")
    if not colon:
        return Topology.parse(topo), None
    parsed = Topology.parse(topo)
    try:
        return parsed, Precision.parse(precision)
    except ConfigError as e:
        raise ConfigError("transition", f"{e.problem} in {whole!r}", e.fix) from None
