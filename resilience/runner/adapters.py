"""Which checkpoint implementation a run tests: the single entry point every command, the runner's rank
processes and the pytest plugin use to turn a backend name into a CheckpointBackend."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:  # the combinations module loads torch; parse_backend runs while pytest reads its options
    from ..vocab.combos import Combination
    from ..vocab.contract import TopologyContract

# short names for the adapters this project ships
ALIASES = {
    "dcp": "resilience.backends.stock_dcp:make",
    "dcp-threads": "resilience.backends.stock_dcp:make_threaded",
    "megatron": "resilience.backends.megatron:make",
}


def resolve(name: str) -> str:
    """The backend name with aliases spelled out."""
    return ALIASES.get(name, name)


def parse_backend(name: str) -> str:
    """`name` as given, once it reads as a backend, checked without importing anything it names:
    'reference', 'broken:NAME' (resilience.broken.CATALOGUE), an alias from ALIASES or
    'package.module:factory'. Raises ConfigError with the fix."""
    if name == "reference":
        return name
    if name.startswith("broken:"):
        from ..broken import CATALOGUE
        impl = name.split(":", 1)[1]
        if impl not in CATALOGUE:
            raise ConfigError("backend", f"no broken implementation {impl!r}", f"choose from {', '.join(CATALOGUE)}")
        return name
    full = resolve(name)
    if ":" not in full:
        aliases = ", ".join(map(repr, ALIASES))
        raise ConfigError("backend", f"cannot read {full!r}",
                          f"use 'reference', 'broken:NAME', {aliases} or 'package.module:factory'")
    module, attr = full.split(":", 1)
    if not module or not attr or not all(p.isidentifier() for p in module.split(".") + attr.split(".")):
        raise ConfigError("backend", f"cannot read {full!r}", "write it as package.module:factory")
    return name


def _factory(name: str):
    parse_backend(name)
    name = resolve(name)
    module, attr = name.split(":", 1)
    try:
        found = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        fix = (f"make {top!r} importable: run from the folder that holds it with PYTHONPATH=. (the `resilience` "
               "command does not look in the current folder), or install your project (pip install -e .)"
               if e.name and top == e.name.split(".")[0] else "install what it imports")
        raise ConfigError("backend", f"cannot import {name!r}: {e}", fix) from None
    except (ImportError, AttributeError) as e:
        raise ConfigError("backend", f"cannot import {name!r}: {e}", "check the module path and factory name") from None
    except Exception as e:  # the module itself failed while importing
        raise ConfigError("backend", f"importing {module!r} raised {type(e).__name__}: {e}",
                          "fix the module or give another one") from None
    if not _is_factory(found):
        raise ConfigError("backend", f"{name!r} is a {type(found).__name__}, not a backend factory",
                          "give a Python function or class taking a combination and returning a CheckpointBackend "
                          "(see resilience.backends.base)")
    return found


def _is_factory(obj) -> bool:
    """A Python function or class (not a builtin such as os.system) that takes one positional argument."""
    import inspect
    if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj)
            # a __call__ written in Python, not mere callability
            or (callable(obj) and inspect.isfunction(getattr(type(obj), "__call__", None)))):  # noqa: B004
        return False
    try:
        inspect.signature(obj).bind(None)
    except (TypeError, ValueError):
        return False
    return True


def make_backend(name: str, combo: Combination):
    """The backend `name` for `combo`, as a full CheckpointBackend (resilience.backends.base):
    'reference', 'broken:NAME' (resilience.broken), an alias from ALIASES, or 'package.module:factory'
    (factory(combo) -> backend)."""
    from ..backends.base import with_defaults
    if name in ("", "reference"):
        from ..checkpoint.reference import ReferenceBackend
        return ReferenceBackend(combo)
    if name.startswith("broken:"):
        from ..broken import make
        return make(name.split(":", 1)[1], combo)
    factory = _factory(name)
    try:
        backend = factory(combo)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError("backend", f"{name}({combo}) raised {type(e).__name__}: {e}",
                          "the factory must return a CheckpointBackend for the combination") from None
    made = with_defaults(backend, f"backend {name}")
    contract_of(name, combo)  # a contract that does not read is one clear error before anything runs
    return made


def supported_combinations(name: str) -> list[Combination] | None:
    """The combinations a backend's factory declares (its `combinations` attribute), or None: all."""
    from ..vocab.combos import Combination
    if name in ("", "reference") or name.startswith("broken:"):
        if name.startswith("broken:"):
            from ..broken import CATALOGUE
            impl = CATALOGUE.get(name.split(":", 1)[1])
            if impl is not None and impl.combos:
                return [Combination.parse(c) for c in impl.combos]
        return None
    declared = getattr(_factory(name), "combinations", None)
    return [Combination.parse(c) for c in declared] if declared else None


def contract_of(name: str | None, combo: Combination) -> TopologyContract:
    """What the backend promises across topologies for `combo`: its factory's `contract` (a mapping
    {change: "load" | "refuse"}, or a function of the combination returning one), else the preset of
    `combo`. ConfigError naming the bad entry."""
    from ..vocab.contract import TopologyContract
    if not name or name == "reference" or name.startswith("broken:"):
        return TopologyContract.preset(combo)
    stated = getattr(_factory(name), "contract", None)
    if stated is None:
        return TopologyContract.preset(combo)
    if callable(stated):
        stated = stated(combo)
    return TopologyContract.parse(stated, where=f"backend {resolve(name)}: contract", source=f"stated by {name}")
