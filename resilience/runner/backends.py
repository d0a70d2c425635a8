"""Which checkpoint implementation a run tests: the reference, or an adapter named module:factory."""
from __future__ import annotations

import importlib

from ..checkpoint.combos import Combination
from ..errors import ConfigError


def make_backend(name: str, combo: Combination):
    """'reference', 'broken:NAME' (resilience.broken) or 'package.module:factory' (factory(combo) -> backend)."""
    if name in ("", "reference"):
        from ..checkpoint.reference import ReferenceBackend
        return ReferenceBackend(combo)
    if name.startswith("broken:"):
        from ..broken import make
        return make(name.split(":", 1)[1], combo)
    if ":" not in name:
        raise ConfigError("backend", f"cannot read {name!r}", "use 'reference' or 'package.module:factory'")
    module, attr = name.split(":", 1)
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError("backend", f"cannot import {name!r}: {e}", "check the module path and factory name") from None
    return factory(combo)
