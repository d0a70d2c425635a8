"""A Megatron GPT-like model spec and the layout of every parameter it has."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from ..errors import ConfigError
from .topology import Topology

DTYPES = ("fp32", "bf16")
OPTIMIZERS = ("adam", "distributed")
# Upper bounds of single fields (what a whole model takes in memory is bounded in state/limits.py).
SIZE_LIMITS = {"num_layers": 1024, "hidden": 1 << 20, "ffn_hidden": 1 << 22, "heads": 1 << 12, "vocab": 1 << 24,
               "make_vocab_size_divisible_by": 1 << 12, "global_batch_size": 1 << 24}
MAX_LR = 10.0
MAX_MODEL_SEED = 1 << 32


def field_problem(name: str, value) -> ConfigError | None:
    """What is wrong with one field's value on its own (None: nothing, or a field this does not know)."""
    where = f"model.{name}"
    if name in SIZE_LIMITS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return ConfigError(where, f"must be a positive integer, got {value!r}")
        if value > SIZE_LIMITS[name]:
            return ConfigError(where, f"{value} is larger than {SIZE_LIMITS[name]}", f"use 1..{SIZE_LIMITS[name]}")
    elif name == "dtype" and value not in DTYPES:
        return ConfigError(where, f"unknown dtype {value!r}", f"use one of {', '.join(DTYPES)}")
    elif name == "optimizer" and value not in OPTIMIZERS:
        return ConfigError(where, f"unknown optimizer {value!r}", f"use one of {', '.join(OPTIMIZERS)}")
    elif name == "lr":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value <= MAX_LR:
            return ConfigError(where, f"must be a finite number in (0, {MAX_LR}], got {value!r}")
    elif name == "seed":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_MODEL_SEED:
            return ConfigError(where, f"must be an integer in [0, 2**32), got {value!r}")
    return None


@dataclass(frozen=True)
class ParamLayout:
    """How one parameter is laid out: global shape, the dim split over tp (None: replicated), its stage."""

    key: str
    shape: tuple[int, ...]
    tp_dim: int | None
    layer: int | None  # global layer number; None for embedding / final norm / output
    where: str = "layer"  # "first" (stage 0), "last" (last stage) or "layer"
    vocab_parallel: bool = False  # rows beyond the true vocab are padding


@dataclass(frozen=True)
class ModelSpec:
    """GPT-like decoder: untied embedding and output layer, Megatron's vocabulary padding."""

    num_layers: int = 4
    hidden: int = 32
    ffn_hidden: int = 64
    heads: int = 4
    vocab: int = 100
    make_vocab_size_divisible_by: int = 8
    dtype: str = "fp32"
    optimizer: str = "adam"
    global_batch_size: int = 8
    lr: float = 1e-2
    seed: int = 1234

    def __post_init__(self):
        for f in fields(self):
            problem = field_problem(f.name, getattr(self, f.name))
            if problem is not None:
                raise problem
        if self.hidden % self.heads:
            raise ConfigError("model.hidden", f"{self.hidden} is not divisible by heads={self.heads}",
                              "choose hidden as a multiple of heads")

    def check_topology(self, topo: Topology) -> None:
        """Raise one clear error if this model cannot be split over `topo`."""
        if self.num_layers % topo.pp:
            raise ConfigError("model.num_layers", f"{self.num_layers} layers are not divisible by pp={topo.pp}",
                              "choose num_layers as a multiple of pp")
        if self.heads % topo.tp:
            raise ConfigError("model.heads", f"{self.heads} heads are not divisible by tp={topo.tp}",
                              "choose heads as a multiple of tp")
        if self.ffn_hidden % topo.tp:
            raise ConfigError("model.ffn_hidden", f"{self.ffn_hidden} is not divisible by tp={topo.tp}",
                              "choose ffn_hidden as a multiple of tp")

    def padded_vocab(self, tp: int) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * tp."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab // multiple) * multiple

    def layers_of_stage(self, pp_rank: int, pp: int) -> range:
        per = self.num_layers // pp
        return range(pp_rank * per, (pp_rank + 1) * per)

    def params(self, tp: int) -> list[ParamLayout]:
        """Every parameter in global order, with global shapes for tensor parallel size `tp`."""
        h, f, v = self.hidden, self.ffn_hidden, self.padded_vocab(tp)
        out = [ParamLayout("embedding.word_embeddings.weight", (v, h), 0, None, "first", True)]
        for layer in range(self.num_layers):
            p = f"decoder.layers.{layer}."
            out += [
                ParamLayout(p + "input_layernorm.weight", (h,), None, layer),
                ParamLayout(p + "self_attention.linear_qkv.weight", (3 * h, h), 0, layer),
                ParamLayout(p + "self_attention.linear_proj.weight", (h, h), 1, layer),
                ParamLayout(p + "pre_mlp_layernorm.weight", (h,), None, layer),
                ParamLayout(p + "mlp.linear_fc1.weight", (f, h), 0, layer),
                ParamLayout(p + "mlp.linear_fc2.weight", (h, f), 1, layer),
            ]
        out += [
            ParamLayout("decoder.final_layernorm.weight", (h,), None, None, "last"),
            ParamLayout("output_layer.weight", (v, h), 0, None, "last", True),
        ]
        return out

    def params_of_stage(self, tp: int, pp_rank: int, pp: int) -> list[ParamLayout]:
        layers = self.layers_of_stage(pp_rank, pp)
        keep = []
        for p in self.params(tp):
            if p.where == "first" and pp_rank == 0 or p.where == "last" and pp_rank == pp - 1 \
                    or p.where == "layer" and p.layer in layers:
                keep.append(p)
        return keep

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelSpec":
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
        out = [ConfigError(f"model.{k}", "unknown field", f"allowed: {', '.join(sorted(known))}")
               for k in d if k not in known]
        out += [p for p in (field_problem(k, v) for k, v in d.items() if k in known) if p is not None]
        if not out:
            try:
                cls(**d)
            except ConfigError as e:
                out.append(e)
        return out
