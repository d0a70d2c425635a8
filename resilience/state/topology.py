"""Parallel layout of a job: tensor, pipeline, data, context and expert parallel sizes and virtual pipeline
chunks, in Megatron's rank order."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from .precision import Precision

MAX_WORLD = 256  # rank processes on one machine (the memory each needs is checked before a job starts)
MAX_FUZZ_WORLD = 64  # the largest world the fuzzer draws: it runs hundreds of cases; larger ones are given
DIMS = ("tp", "pp", "dp", "ep", "etp", "cp", "vpp")  # as a topology is written; the first three always
_NAME = re.compile(r"(vpp|etp|tp|pp|dp|ep|cp)(\d+)")


@dataclass(frozen=True)
class Coords:
    """Where one rank sits: its tensor, pipeline, data and context parallel ranks, its index in the
    data-parallel group that context parallel widens (dp x cp: where the distributed optimizer shards dense
    parameters and every replica of them lives), and its place in the expert grid of its pipeline stage
    (expert tensor, expert and expert-data parallel ranks)."""

    rank: int
    tp: int
    pp: int
    dp: int
    cp: int = 0
    dpcp: int = 0
    etp: int = 0
    ep: int = 0
    edp: int = 0


@dataclass(frozen=True)
class Topology:
    """tp x cp x dp x pp ranks in Megatron's rank order (parallel_state's tp-cp-ep-dp-pp: tp fastest, then
    cp, then dp, then pp); expert parallel (ep) and expert tensor parallel (etp) lay the ranks of each
    pipeline stage out again as etp x ep x expert-data-parallel, etp fastest; vpp is the number of layer
    chunks each pipeline rank holds (interleaved: chunk v of stage p is chunk v * pp + p of the model)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int = 1
    cp: int = 1
    vpp: int = 1

    def __post_init__(self):
        for field in DIMS:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"topology.{field}", f"must be a positive integer, got {value!r}")
            if value < 1:
                raise ConfigError(f"topology.{field}", f"must be at least 1, got {value}")
        if self.world > MAX_WORLD:
            raise ConfigError(
                "topology",
                f"world size tp*cp*dp*pp = {self.world} is larger than {MAX_WORLD}",
                "use smaller tp, cp, dp or pp",
            )
        stage = self.tp * self.cp * self.dp
        if stage % (self.ep * self.etp):
            raise ConfigError(
                "topology.ep",
                f"ep*etp = {self.ep * self.etp} does not divide the {stage} ranks of a pipeline stage (tp*cp*dp)",
                "choose ep and etp whose product divides tp*cp*dp",
            )
        if self.vpp > 1 and self.pp == 1:
            raise ConfigError("topology.vpp", f"vpp {self.vpp} needs pipeline parallel", "use pp > 1, or vpp 1")

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def dpcp(self) -> int:
        """Ranks of the data-parallel group context parallel widens."""
        return self.dp * self.cp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: the ranks of a stage left once etp and ep are laid out."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    def __str__(self) -> str:
        extra = "".join(f"{d}{getattr(self, d)}" for d in DIMS[3:] if getattr(self, d) != 1)
        return f"tp{self.tp}pp{self.pp}dp{self.dp}{extra}"

    @classmethod
    def parse(cls, text: str) -> Topology:
        """'tp2pp1dp4', with ep, etp, cp and vpp after it when not 1 ('tp2pp2dp2ep2cp2'; a dimension left
        out is 1), or '2,1,4' (tp, pp, dp)."""
        text = str(text).strip().lower()
        m = re.fullmatch(r"(\d+),(\d+),(\d+)", text)
        if m:
            return cls(*(int(g) for g in m.groups()))
        sizes: dict[str, int] = {}
        pos = 0
        while pos < len(text) and (m := _NAME.match(text, pos)):
            if m.group(1) in sizes:
                raise ConfigError("topology", f"{text!r} gives {m.group(1)} twice", "give each dimension once")
            sizes[m.group(1)] = int(m.group(2))
            pos = m.end()
        if not text or pos != len(text):
            raise ConfigError(
                "topology", f"cannot read {text!r}", "write it as tp2pp1dp4 (with ep2, etp2, cp2, vpp2 after) or 2,1,4"
            )
        return cls(**sizes)

    def coords(self, rank: int) -> Coords:
        if not 0 <= rank < self.world:
            raise ConfigError("rank", f"{rank} is outside world size {self.world} of {self}")
        tp = rank % self.tp
        cp = (rank // self.tp) % self.cp
        dp = (rank // (self.tp * self.cp)) % self.dp
        pp = rank // (self.tp * self.cp * self.dp)
        in_stage = rank % (self.tp * self.cp * self.dp)
        etp, ep = in_stage % self.etp, (in_stage // self.etp) % self.ep
        return Coords(rank, tp, pp, dp, cp, cp + self.cp * dp, etp, ep, in_stage // (self.etp * self.ep))

    def rank_of(self, tp: int, pp: int, dp: int, cp: int = 0) -> int:
        return tp + self.tp * (cp + self.cp * (dp + self.dp * pp))

    def expert_rank_of(self, etp: int, ep: int, edp: int, pp: int) -> int:
        """The global rank at a place of the expert grid of stage `pp` (etp fastest, then ep, then edp)."""
        return etp + self.etp * (ep + self.ep * edp) + self.tp * self.cp * self.dp * pp

    def all_coords(self) -> list[Coords]:
        return [self.coords(r) for r in range(self.world)]

    # Groups: lists of global ranks that share every coordinate but the ones named.
    def _grouped(self, key) -> list[list[int]]:
        groups: dict = {}
        for c in self.all_coords():
            groups.setdefault(key(c), []).append(c.rank)
        return list(groups.values())

    def tp_groups(self) -> list[list[int]]:
        return self._grouped(lambda c: (c.pp, c.dp, c.cp))

    def dp_groups(self) -> list[list[int]]:
        return self._grouped(lambda c: (c.pp, c.tp, c.cp))

    def dp_cp_groups(self) -> list[list[int]]:
        """The data-parallel groups widened by context parallel: where dense state is replicated and the
        distributed optimizer shards it (Megatron's data-parallel group with context parallel)."""
        return self._grouped(lambda c: (c.pp, c.tp))

    def pp_groups(self) -> list[list[int]]:
        return self._grouped(lambda c: (c.dp, c.tp, c.cp))

    def ep_groups(self) -> list[list[int]]:
        return self._grouped(lambda c: (c.pp, c.etp, c.edp))

    def edp_groups(self) -> list[list[int]]:
        """Expert-data-parallel groups: where one expert's state is replicated and sharded."""
        return self._grouped(lambda c: (c.pp, c.etp, c.ep))

    def to_dict(self) -> dict:
        return {d: getattr(self, d) for d in DIMS if d in DIMS[:3] or getattr(self, d) != 1}

    @classmethod
    def from_dict(cls, d: dict) -> Topology:
        return cls(**{k: int(d[k]) for k in DIMS if k in d})


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
        return tuple(f for f in DIMS if getattr(self.save, f) != getattr(self.load, f))

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
