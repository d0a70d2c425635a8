"""Which checkpoint implementation a run tests: the single entry point every command, the runner's rank
processes and the pytest plugin use to turn a backend name into a CheckpointBackend."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..backends.options import join_spec, resolve_options, split_spec
from ..broken.catalogue import CATALOGUE, make as make_broken
from ..errors import ConfigError
from ..launch import heap

if TYPE_CHECKING:  # the combinations module loads torch; parse_backend runs while pytest reads its options
    from ..vocab.combos import Combination
    from ..vocab.contract import TopologyContract

# short names for the adapters this project ships (an alias may carry options: see split)
ALIASES = {
    "dcp": "resilience.backends.stock_dcp:make",
    "dcp-threads": "resilience.backends.stock_dcp:make[thread_count=4]",
    "megatron": "resilience.backends.megatron:make",
    "nvrx": "resilience.backends.nvrx:make",
}


def split(name: str) -> tuple[str, dict[str, str]]:
    """(the backend without its options, {option: value as written}): `ALIAS:k=v,...` or
    `NAME[k=v,...]` (resilience.backends.options.split_spec). Syntax only."""
    return split_spec(name, ALIASES)


def resolve(name: str) -> str:
    """The backend name with aliases spelled out (options stay as written)."""
    base, given = split(name)
    if base not in ALIASES:
        return name
    full, preset = split(ALIASES[base])
    return join_spec(full, {**preset, **given}, alias=False)


def parse_backend(name: str) -> str:
    """`name` once it reads as a backend, checked without importing anything it names: 'reference',
    'broken:NAME' (resilience.broken.catalogue.CATALOGUE), an alias from ALIASES or 'package.module:factory', each
    but the first two optionally with options (`dcp:thread_count=4,async=process`,
    `pkg.mod:factory[thread_count=4]`; their names and values are checked when the factory is imported).
    Returned with its options written one way. Raises ConfigError with the fix."""
    name = name.strip()
    base, given = split(name)
    if given and (base == "reference" or base.startswith("broken:")):
        raise ConfigError("backend", f"{base} takes no options", f"give {base!r} alone")
    if name == "reference":
        return name
    if name.startswith("broken:"):
        impl = name.split(":", 1)[1]
        if impl not in CATALOGUE:
            raise ConfigError("backend", f"no broken implementation {impl!r}", f"choose from {', '.join(CATALOGUE)}")
        return name
    full, _ = split(resolve(base))
    if ":" not in full:
        aliases = ", ".join(map(repr, ALIASES))
        raise ConfigError(
            "backend", f"cannot read {full!r}", f"use 'reference', 'broken:NAME', {aliases} or 'package.module:factory'"
        )
    module, attr = full.split(":", 1)
    if not module or not attr or not all(p.isidentifier() for p in module.split(".") + attr.split(".")):
        raise ConfigError("backend", f"cannot read {full!r}", "write it as package.module:factory")
    return join_spec(base, given, alias=base in ALIASES)


def _factory(name: str):
    return _factory_and_options(name)[0]


def _factory_and_options(name: str) -> tuple[Any, dict[str, Any]]:
    """The factory `name` names and the typed options it is given (an alias's own, then the spec's)."""
    from ..backends.options import declared_of

    label = split(parse_backend(name))[0]
    name, given = split(resolve(name))
    module, attr = name.split(":", 1)
    try:
        found = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        fix = (
            f"make {top!r} importable: run from the folder that holds it with PYTHONPATH=. (the `resilience` "
            "command does not look in the current folder), or install your project (pip install -e .)"
            if e.name and top == e.name.split(".")[0]
            else "install what it imports"
        )
        raise ConfigError("backend", f"cannot import {name!r}: {e}", fix) from None
    except (ImportError, AttributeError) as e:
        raise ConfigError("backend", f"cannot import {name!r}: {e}", "check the module path and factory name") from None
    except Exception as e:  # the module itself failed while importing
        raise ConfigError(
            "backend", f"importing {module!r} raised {type(e).__name__}: {e}", "fix the module or give another one"
        ) from None
    if not _is_factory(found):
        raise ConfigError(
            "backend",
            f"{name!r} is a {type(found).__name__}, not a backend factory",
            "give a Python function or class taking a combination and returning a CheckpointBackend "
            "(see resilience.backends.base)",
        )
    return found, resolve_options(declared_of(found), given, label)


def declared_options(name: str):
    """The options the backend `name` declares (resilience.backends.options.Option), () for the reference
    and the broken implementations."""
    from ..backends.options import declared_of

    base, _ = split(name)
    if base in ("", "reference") or base.startswith("broken:"):
        return ()
    return declared_of(_factory(base))


def _is_factory(obj) -> bool:
    """A Python function or class (not a builtin such as os.system) that takes one positional argument."""
    import inspect

    if not (
        inspect.isfunction(obj)
        or inspect.isclass(obj)
        or inspect.ismethod(obj)
        # a __call__ written in Python, not mere callability
        or (callable(obj) and inspect.isfunction(getattr(type(obj), "__call__", None)))  # noqa: B004
    ):
        return False
    try:
        inspect.signature(obj).bind(None)
    except (TypeError, ValueError):
        return False
    return True


def preload(pairs: Iterable[tuple[str, Combination]]) -> None:
    """Make each (backend, combination) once in this process, so the worker and rank processes forked
    from it find every import done (a TORCH_DCP format pulls in torch._dynamo: over a second each time).
    Only a warm-up: a backend that cannot be made is left to its case, which reports why."""
    with heap.loading():
        for name, combo in dict.fromkeys((n or "reference", c) for n, c in pairs):
            try:
                make_backend(name, combo)
            except Exception:  # noqa: BLE001  the case meets the same error and reports it in its row
                continue


def make_backend(name: str, combo: Combination):
    """The backend `name` for `combo`, as a full CheckpointBackend (resilience.backends.base):
    'reference', 'broken:NAME' (resilience.broken.catalogue), an alias from ALIASES, or 'package.module:factory'
    (factory(combo) -> backend), the last two with options: factory(combo, **options), each option
    checked against the factory's declared `options`."""
    from ..backends.base import with_defaults

    if name in ("", "reference"):
        from ..checkpoint.reference import ReferenceBackend

        return ReferenceBackend(combo)
    if name.startswith("broken:"):
        return make_broken(name.split(":", 1)[1], combo)
    factory, options = _factory_and_options(name)
    try:
        backend = factory(combo, **options) if options else factory(combo)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(
            "backend",
            f"{name}({combo}) raised {type(e).__name__}: {e}",
            "the factory must return a CheckpointBackend for the combination",
        ) from None
    made = with_defaults(backend, f"backend {name}")
    contract_of(name, combo)  # a contract that does not read is one clear error before anything runs
    return made


def supported_combinations(name: str) -> list[Combination] | None:
    """The combinations a backend's factory declares (its `combinations` attribute), or None: all."""
    from ..vocab.combos import Combination

    if name in ("", "reference") or name.startswith("broken:"):
        if name.startswith("broken:"):
            impl = CATALOGUE.get(name.split(":", 1)[1])
            if impl is not None and impl.combos:
                return [Combination.parse(c) for c in impl.combos]
        return None
    declared = getattr(_factory(name), "combinations", None)
    return [Combination.parse(c) for c in declared] if declared else None


def keep_last_of(name: str | None) -> int | None:
    """How many newest checkpoints the backend keeps on its own (its factory's `keep_last`; NVRx's local
    manager removes every older one after a save), None when it removes none. ConfigError if not a count."""
    if not name or name == "reference" or name.startswith("broken:"):
        return None
    stated = getattr(_factory(name), "keep_last", None)
    if stated is not None and (not isinstance(stated, int) or isinstance(stated, bool) or stated < 1):
        raise ConfigError(
            f"backend {resolve(name)}: keep_last",
            f"must be a positive integer, got {stated!r}",
            "give the number of newest checkpoints the backend keeps, or leave keep_last out",
        )
    return stated


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
