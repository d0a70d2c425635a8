"""A Megatron GPT-like model spec and the layout of every parameter it has."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

from ..errors import ConfigError
from .precision import DTYPES, Precision
from .topology import Topology

OPTIMIZERS = ("adam", "distributed")
# Upper bounds of single fields (what a whole model takes in memory is bounded in state/limits.py).
SIZE_LIMITS = {
    "num_layers": 1024,
    "hidden": 1 << 20,
    "ffn_hidden": 1 << 22,
    "heads": 1 << 12,
    "vocab": 1 << 24,
    "make_vocab_size_divisible_by": 1 << 12,
    "global_batch_size": 1 << 24,
}
MAX_LR = 10.0
MAX_MODEL_SEED = 1 << 32
VALUE_RANGES = ("unit", "wide")  # values in [-0.5, 0.5), or spread over 2**-40 .. 2**40 in magnitude
# switches of the adversarial state: 0 is off
OFF_OR_COUNT = {"rampup_samples": 1 << 24, "skip_every": 1 << 20, "num_experts": 1 << 10}
MAX_START_ITERATION = 10**9  # past Megatron's iter_%07d padding (9,999,999) and then some
# sized_params: extra 1-d parameters of a chosen size (a tensor just past a writer's chunk, or one row that
# leaves a distributed-optimizer shard empty), named [A-Za-z0-9_], on the last pipeline stage
MAX_SIZED_PARAMS, MAX_SIZED_ELEMENTS = 16, 1 << 24
SIZED_PREFIX = "extra."  # + name + ".weight": their keys in the state
EXPERT_MARK = ".experts.local_experts."  # in the key of every expert's parameter (and its optimizer state)
_SIZED_NAME = re.compile(r"[A-Za-z0-9_]{1,40}")


def field_problem(name: str, value) -> ConfigError | None:
    """What is wrong with one field's value on its own (None: nothing, or a field this does not know)."""
    where = f"model.{name}"
    if name in SIZE_LIMITS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return ConfigError(where, f"must be a positive integer, got {value!r}")
        if value > SIZE_LIMITS[name]:
            return ConfigError(where, f"{value} is larger than {SIZE_LIMITS[name]}", f"use 1..{SIZE_LIMITS[name]}")
    elif name in ("dtype", "optim_dtype") and value not in DTYPES:
        return ConfigError(where, f"unknown dtype {value!r}", f"use one of {', '.join(DTYPES)}")
    elif name == "optimizer" and value not in OPTIMIZERS:
        return ConfigError(where, f"unknown optimizer {value!r}", f"use one of {', '.join(OPTIMIZERS)}")
    elif name in OFF_OR_COUNT:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= OFF_OR_COUNT[name]:
            return ConfigError(where, f"must be an integer in 0..{OFF_OR_COUNT[name]} (0: off), got {value!r}")
    elif name == "start_iteration":  # noqa: SIM102 (one branch per field)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_START_ITERATION:
            return ConfigError(where, f"must be an integer in 0..{MAX_START_ITERATION}, got {value!r}")
    elif name in ("padding_values", "shared_experts") and not isinstance(value, bool):
        return ConfigError(where, f"must be true or false, got {value!r}")
    elif name == "sized_params":
        return _sized_problem(value)
    elif name == "value_range" and value not in VALUE_RANGES:
        return ConfigError(where, f"unknown value range {value!r}", f"use one of {', '.join(VALUE_RANGES)}")
    elif name == "lr":
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0 < value <= MAX_LR
        ):
            return ConfigError(where, f"must be a finite number in (0, {MAX_LR}], got {value!r}")
    elif name == "seed":  # noqa: SIM102 (one branch per field, as above)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_MODEL_SEED:
            return ConfigError(where, f"must be an integer in [0, 2**32), got {value!r}")
    return None


def _sized_problem(value) -> ConfigError | None:
    where = "model.sized_params"
    if not isinstance(value, (Mapping, tuple)):
        return ConfigError(where, f"must be a mapping of name: elements, got {type(value).__name__}")
    pairs = list(value.items() if isinstance(value, Mapping) else value)
    if len(pairs) > MAX_SIZED_PARAMS:
        return ConfigError(where, f"{len(pairs)} parameters", f"give at most {MAX_SIZED_PARAMS}")
    for name, n in pairs:
        if not isinstance(name, str) or not _SIZED_NAME.fullmatch(name):
            return ConfigError(f"{where}.{name}", "a name must be 1-40 characters of A-Z a-z 0-9 _")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SIZED_ELEMENTS:
            return ConfigError(f"{where}.{name}", f"must be a number of elements in 1..{MAX_SIZED_ELEMENTS}, got {n!r}")
    return None


def _mix(seed: int, n: int) -> int:
    """A well-mixed integer of (seed, n): splitmix64's finaliser."""
    x = (seed * 0x9E3779B97F4A7C15 + n) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def is_expert_key(key: str) -> bool:
    """Whether a record key (a parameter's, or its optimizer state's) belongs to an expert."""
    return EXPERT_MARK in key


@dataclass(frozen=True)
class ParamLayout:
    """How one parameter is laid out: global shape, the dim split over tp (None: replicated), its stage."""

    key: str
    shape: tuple[int, ...]
    tp_dim: int | None
    layer: int | None  # global layer number; None for embedding / final norm / output
    where: str = "layer"  # "first" (stage 0), "last" (last stage) or "layer"
    vocab_parallel: bool = False  # rows beyond the true vocab are padding
    # the global index of the expert this parameter belongs to: split over etp (tp_dim then names the dim
    # etp splits), held only by the ranks of its expert-parallel rank, replicated over expert data parallel
    expert: int | None = None


@dataclass(frozen=True)
class ModelSpec:
    """GPT-like decoder: untied embedding and output layer, Megatron's vocabulary padding."""

    num_layers: int = 4
    hidden: int = 32
    ffn_hidden: int = 64
    heads: int = 4
    vocab: int = 100
    make_vocab_size_divisible_by: int = 8
    dtype: str = "fp32"  # the parameters' (bf16 keeps fp32 main parameters)
    optimizer: str = "adam"
    optim_dtype: str = "fp32"  # Adam's two moments (bf16: rounded after every step, as some trainers keep them)
    global_batch_size: int = 8
    lr: float = 1e-2
    seed: int = 1234
    # The adversarial part, on by default: a batch-size ramp-up over this many samples (0: none) and
    # skipped iterations (about one in `skip_every`, as a loss-scale overflow skips them; 0: none) make
    # the data position no function of the iteration; "wide" values include ones fp16 or bf16 cannot hold.
    rampup_samples: int = 16
    skip_every: int = 3
    value_range: str = "wide"
    # the iteration training starts from: a job resumed from elsewhere, or one past a padding limit
    start_iteration: int = 0
    # name -> elements of an extra 1-d parameter (a mapping in to_dict / from_dict, pairs in name order here)
    sized_params: tuple[tuple[str, int], ...] = ()
    # the vocabulary's padding rows as Megatron has them, parameters with values that train (their logits
    # enter the softmax): every row of the padded tensor is then state, and a load must restore them all.
    # Off: padding rows are zero, never updated, and left out of every comparison (a tp change moves them)
    padding_values: bool = False
    # mixture of experts (0: dense): every layer's MLP becomes a router (replicated over tp) and this many
    # experts of ffn_hidden each, split over ep and, inside an expert, over etp (Megatron's SequentialMLP,
    # each expert's keys named by its global index); with shared_experts one dense MLP beside them, over tp
    num_experts: int = 0
    shared_experts: bool = False

    def __post_init__(self):
        if isinstance(self.sized_params, Mapping):  # frozen, and hashable: kept as sorted pairs
            object.__setattr__(self, "sized_params", tuple(sorted(self.sized_params.items())))
        for f in fields(self):
            problem = field_problem(f.name, getattr(self, f.name))
            if problem is not None:
                raise problem
        if self.hidden % self.heads:
            raise ConfigError(
                "model.hidden",
                f"{self.hidden} is not divisible by heads={self.heads}",
                "choose hidden as a multiple of heads",
            )

    @property
    def precision(self) -> Precision:
        return Precision(self.dtype, self.optim_dtype)

    def in_precision(self, precision: Precision | str) -> ModelSpec:
        """This model trained in another precision (`bf16`, `fp32+optim_bf16`, ...)."""
        p = Precision.parse(precision)
        return replace(self, dtype=p.params, optim_dtype=p.optim)

    def whole_on_one_rank(self, tp: int) -> ModelSpec:
        """The model whose one-rank state is the global state of this one on tensor parallel size `tp`: with
        padding_values the padded vocabulary depends on tp, and one rank pads it as `tp` ranks would."""
        if not self.padding_values or tp == 1:
            return self
        return replace(self, make_vocab_size_divisible_by=self.make_vocab_size_divisible_by * tp)

    def batch_size(self, consumed_samples: int) -> int:
        """Global batch size at a data position: a linear ramp from 1 to global_batch_size over
        rampup_samples samples (Megatron's --rampup-batch-size, in steps of one sample)."""
        if consumed_samples >= self.rampup_samples:
            return self.global_batch_size
        return 1 + (self.global_batch_size - 1) * consumed_samples // self.rampup_samples

    def is_skipped(self, iteration: int) -> bool:
        """Whether iteration `iteration` (1-based) is skipped: its data is consumed, no update is made."""
        return self.skip_every > 0 and _mix(self.seed, iteration) % self.skip_every == 0

    def check_topology(self, topo: Topology) -> None:
        """Raise one clear error if this model cannot be split over `topo`."""
        if self.num_layers % (topo.pp * topo.vpp):
            raise ConfigError(
                "model.num_layers",
                f"{self.num_layers} layers are not divisible by pp={topo.pp}"
                + (f" x vpp={topo.vpp} layer chunks" if topo.vpp > 1 else ""),
                "choose num_layers as a multiple of pp" + (" x vpp" if topo.vpp > 1 else ""),
            )
        self._check_experts(topo)
        if self.heads % topo.tp:
            raise ConfigError(
                "model.heads",
                f"{self.heads} heads are not divisible by tp={topo.tp}",
                "choose heads as a multiple of tp",
            )
        if self.ffn_hidden % topo.tp:
            raise ConfigError(
                "model.ffn_hidden",
                f"{self.ffn_hidden} is not divisible by tp={topo.tp}",
                "choose ffn_hidden as a multiple of tp",
            )

    def _check_experts(self, topo: Topology) -> None:
        if topo.ep * topo.etp > 1 and not self.num_experts:
            raise ConfigError(
                "topology.ep",
                f"ep={topo.ep} and etp={topo.etp} split experts, and this model is dense",
                "use ep 1 and etp 1, or give the model num_experts",
            )
        if self.num_experts % topo.ep:
            raise ConfigError(
                "topology.ep",
                f"ep={topo.ep} does not divide the model's {self.num_experts} experts",
                "choose ep as a divisor of num_experts",
            )
        if self.ffn_hidden % topo.etp:
            raise ConfigError(
                "topology.etp",
                f"etp={topo.etp} does not divide an expert's ffn_hidden={self.ffn_hidden}",
                "choose etp as a divisor of ffn_hidden",
            )

    def experts_of(self, ep_rank: int, ep: int) -> range:
        """The global indices of the experts expert-parallel rank `ep_rank` holds (a contiguous run)."""
        per = self.num_experts // ep
        return range(ep_rank * per, (ep_rank + 1) * per)

    def padded_vocab(self, tp: int) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * tp."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab // multiple) * multiple

    def layers_of_stage(self, pp_rank: int, pp: int, vpp: int = 1) -> list[int]:
        """The layers pipeline rank `pp_rank` holds: one contiguous run, or with `vpp` chunks interleaved as
        Megatron's virtual pipeline lays them out (chunk v of stage p is chunk v * pp + p of the model)."""
        per = self.num_layers // (pp * vpp)
        return [(v * pp + pp_rank) * per + i for v in range(vpp) for i in range(per)]

    def params(self, tp: int) -> list[ParamLayout]:
        """Every parameter in global order, with global shapes for tensor parallel size `tp`."""
        h, v = self.hidden, self.padded_vocab(tp)
        out = [ParamLayout("embedding.word_embeddings.weight", (v, h), 0, None, "first", True)]
        for layer in range(self.num_layers):
            p = f"decoder.layers.{layer}."
            out += [
                ParamLayout(p + "input_layernorm.weight", (h,), None, layer),
                ParamLayout(p + "self_attention.linear_qkv.weight", (3 * h, h), 0, layer),
                ParamLayout(p + "self_attention.linear_proj.weight", (h, h), 1, layer),
                ParamLayout(p + "pre_mlp_layernorm.weight", (h,), None, layer),
            ]
            out += self._mlp(p + "mlp.", layer)
        out += [
            ParamLayout("decoder.final_layernorm.weight", (h,), None, None, "last"),
            ParamLayout("output_layer.weight", (v, h), 0, None, "last", True),
        ]
        out += [ParamLayout(f"{SIZED_PREFIX}{name}.weight", (n,), None, None, "last") for name, n in self.sized_params]
        return out

    def _mlp(self, p: str, layer: int) -> list[ParamLayout]:
        h, f = self.hidden, self.ffn_hidden
        if not self.num_experts:
            return [
                ParamLayout(p + "linear_fc1.weight", (f, h), 0, layer),
                ParamLayout(p + "linear_fc2.weight", (h, f), 1, layer),
            ]
        out = [ParamLayout(p + "router.weight", (self.num_experts, h), None, layer)]
        for g in range(self.num_experts):
            e = f"{p}{EXPERT_MARK[1:]}{g}."
            out += [
                ParamLayout(e + "linear_fc1.weight", (f, h), 0, layer, expert=g),
                ParamLayout(e + "linear_fc2.weight", (h, f), 1, layer, expert=g),
            ]
        if self.shared_experts:
            out += [
                ParamLayout(p + "shared_experts.linear_fc1.weight", (f, h), 0, layer),
                ParamLayout(p + "shared_experts.linear_fc2.weight", (h, f), 1, layer),
            ]
        return out

    def params_of_stage(self, tp: int, pp_rank: int, pp: int, vpp: int = 1) -> list[ParamLayout]:
        layers = set(self.layers_of_stage(pp_rank, pp, vpp))
        keep = []
        for p in self.params(tp):
            if (
                p.where == "first"
                and pp_rank == 0
                or p.where == "last"
                and pp_rank == pp - 1
                or p.where == "layer"
                and p.layer in layers
            ):
                keep.append(p)
        return keep

    def to_dict(self) -> dict:
        return asdict(self) | {"sized_params": dict(self.sized_params)}

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        problems = cls.problems_of(d)
        if problems:
            raise problems[0]
        return cls(**d)

    @classmethod
    def problems_of(cls, d: Mapping) -> list[ConfigError]:
        """Every problem of a model mapping at once: each unknown field, each field's own value, then
        (when those are fine) the checks across fields."""
        if not isinstance(d, Mapping):
            return [ConfigError("model", f"must be a mapping of model fields, got {type(d).__name__}")]
        known = {f.name for f in fields(cls)}
        out = [
            ConfigError(f"model.{k}", "unknown field", f"allowed: {', '.join(sorted(known))}")
            for k in d
            if k not in known
        ]
        out += [p for p in (field_problem(k, v) for k, v in d.items() if k in known) if p is not None]
        if not out:
            try:
                cls(**d)
            except ConfigError as e:
                out.append(e)
        return out
