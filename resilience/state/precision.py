"""The precision of a training state: the parameters' dtype and the optimizer state's (Adam's two moments).

Written `PARAMS` or `PARAMS+optim_OPTIM`, each `fp32` or `bf16`: `bf16` is bf16 parameters with fp32 main
parameters and fp32 moments, `fp32+optim_bf16` fp32 parameters with moments kept in bf16 (as some trainers
keep them). One spelling, one record: a topology side (`tp1pp1dp2:fp32+optim_bf16`), a resume step's
`precision:` and the history's `dtype` all read it here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

DTYPES = ("fp32", "bf16")
_FORM = re.compile(r"(fp32|bf16)(?:\+optim_(fp32|bf16))?")
SPELLING = "PARAMS or PARAMS+optim_OPTIM with each fp32 or bf16, e.g. bf16 or fp32+optim_bf16"


@dataclass(frozen=True)
class Precision:
    """The parameters' dtype (bf16 keeps fp32 main parameters) and the optimizer moments' dtype."""

    params: str = "fp32"
    optim: str = "fp32"

    def __post_init__(self):
        for name in ("params", "optim"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(
                    f"precision.{name}", f"unknown dtype {getattr(self, name)!r}", f"use one of {', '.join(DTYPES)}"
                )

    def __str__(self) -> str:
        return self.params if self.optim == "fp32" else f"{self.params}+optim_{self.optim}"

    def changes(self, other: Precision) -> tuple[str, ...]:
        """What differs from `other`: "params", "optim" or both."""
        return tuple(f for f in ("params", "optim") if getattr(self, f) != getattr(other, f))

    def rounds_moments_to(self, other: Precision) -> bool:
        """Whether a state in `other` loading a checkpoint saved in this precision must round the optimizer
        moments (fp32 into bf16): a loss no conversion avoids, unlike the parameters' (bf16 keeps fp32 main
        parameters), so a load that does it must say so."""
        return self.optim == "fp32" and other.optim == "bf16"

    @classmethod
    def parse(cls, text, where: str = "precision") -> Precision:
        """`bf16`, `fp32+optim_bf16`, ...; anything else is one ConfigError naming the spelling."""
        if isinstance(text, Precision):
            return text
        m = _FORM.fullmatch(text.strip().lower()) if isinstance(text, str) else None
        if m is None:
            raise ConfigError(where, f"cannot read precision {text!r}", f"write {SPELLING}")
        return cls(m.group(1), m.group(2) or "fp32")
