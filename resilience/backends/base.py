"""The checkpoint backend protocol: what any checkpoint implementation provides to be tested here.

A backend is made for one combination by a factory, `factory(combo) -> backend`, named on the command
line as `--backend package.module:factory` (`resilience run`, `resilience matrix`, the pytest plugin:
all of them go through `resilience.runner.adapters`, which resolves the name once per run). The
reference implementation is one such backend; so are the adapters in this package and the deliberately
broken ones.

Call order, as the runner drives it on every rank of a job (each method is collective: every rank
calls it, in the same order; rank-local work inside is the backend's business):

    backend = factory(combo)            # in each rank process, after the process group is up
    backend.save(state, root)           # sync: returns once committed; async: once staged
    backend.in_flight_iteration         # async: the iteration whose write is still running, else None
    backend.finalize()                  # async: wait for it and commit; raise if it failed
    ...                                 # (a later job, maybe on another topology)
    backend.load(state, root)           # fills `state` in place, returns a LoadResult
    backend.list_checkpoints(root)      # one process, no collective: what is on disk

What the runner needs from the answers, so the checkers can judge them:
- `save` raising means the save is not done; returning (sync) or `finalize` returning (async) is the
  acknowledgement the durability checker holds the backend to.
- `load` returns `LoadResult(iteration, path, rng_restored, warnings)` (resilience.vocab, with
  `CheckpointInfo`, the entries of `list_checkpoints`): the iteration loaded (as saved),
  its folder, whether the RNG was restored (only claim it where it is exact), and any fallback warnings.
  It raises `TopologyChangeRefused` for a topology change it does not support, `CheckpointNotFound` or
  `IntegrityError` when nothing valid can be loaded. Any other exception counts as a crash of the rank.
  Backends wrapping a library translate its errors into these (DCP's CheckpointException derives from
  BaseException: an adapter must catch it), without changing what the library decides.
- The state's topology (`state.topo`) is the topology to load on; it may differ from the saver's.

Optional members: a backend that only saves synchronously may leave out `finalize` and
`in_flight_iteration`; `with_defaults` (applied by make_backend) adds `finalize() -> True` and
`in_flight_iteration = None`.

What a factory may say about itself, as attributes on it (`factory.combinations = (...)`): the six of
`FactoryTraits`, read once, by `traits_of`, and nowhere else. `resilience.runner.adapters` holds them, with
the factory and its options, in the value a run resolves its backend to once (`BackendRef`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError
from ..state import TrainingState
from ..vocab import CheckpointInfo, LoadResult
from ..vocab.combos import Combination
from ..vocab.contract import TopologyContract
from ..vocab.phases import WRITER_KINDS
from .options import Option

REQUIRED = ("save", "load", "list_checkpoints")
OPTIONAL = ("finalize", "in_flight_iteration")


@runtime_checkable
class CheckpointBackend(Protocol):
    """A checkpoint implementation under test, for one combination. Every method is collective
    except list_checkpoints."""

    name: str

    def save(self, state: TrainingState, root: str) -> None:
        """Checkpoint `state` (its iteration is `state.iteration`) under the folder `root`."""

    def finalize(self, *, blocking: bool = True) -> bool:
        """Commit an async save that was started; raise if its write failed. Non-blocking: False while
        the write still runs. True when nothing is in flight."""

    @property
    def in_flight_iteration(self) -> int | None:
        """The iteration of the async save still being written, or None."""

    def load(self, state: TrainingState, root: str) -> LoadResult:
        """Load the newest checkpoint under `root` this backend considers valid into `state`, on
        `state.topo`."""

    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        """Every checkpoint this backend sees under `root`, newest first (this process only)."""


class _SyncOnly:
    """Supplies the optional members for a backend that only saves synchronously."""

    def __init__(self, inner):
        self._inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)

    def __getattr__(self, attr):
        return getattr(self._inner, attr)

    def save(self, state, root):
        return self._inner.save(state, root)

    def load(self, state, root):
        return self._inner.load(state, root)

    def list_checkpoints(self, root):
        return self._inner.list_checkpoints(root)

    def finalize(self, *, blocking: bool = True) -> bool:
        fn = getattr(self._inner, "finalize", None)
        return True if fn is None else fn(blocking=blocking)

    @property
    def in_flight_iteration(self) -> int | None:
        return getattr(self._inner, "in_flight_iteration", None)


def with_defaults(backend, where: str = "backend") -> CheckpointBackend:
    """`backend` as a full CheckpointBackend: ConfigError if a required method is missing; the optional
    members added when absent."""
    missing = [m for m in REQUIRED if not callable(getattr(backend, m, None))]
    if missing:
        raise ConfigError(
            where,
            f"{type(backend).__name__} has no {', '.join(missing)}",
            "a backend provides save, load and list_checkpoints (see resilience.backends.base)",
        )
    if isinstance(backend, CheckpointBackend):
        return backend
    return _SyncOnly(backend)


TRAITS = ("combinations", "contract", "keep_last", "layout_hints", "io_through_seam", "options", "writer")

# a stated contract: a mapping {change: promise}, or a function of the combination returning one
StatedContract = Mapping[str, str] | TopologyContract | Callable[[Combination], Any]


@dataclass(frozen=True)
class FactoryTraits:
    """What a factory says about itself beside making backends, all optional: each field is the factory
    attribute of the same name (`factory.keep_last = 1`), read and checked by `traits_of`. The reference
    and the broken implementations have their own (`resilience.runner.adapters`)."""

    combinations: tuple[Combination, ...] | None = None
    """The combinations it implements, written as strings (`('LOCAL/torch/sync',)`): what `resilience
    matrix`, the pytest plugin and `adapter check` run when none is named. None: all six (the factory
    raises ConfigError for those it lacks)."""

    contract: StatedContract | None = None
    """What a load on another topology must do: a mapping {change: "load" | "refuse"} (tp, pp, dp,
    precision), or a function of the combination returning one. None: the preset of the combination
    (resilience.vocab.contract)."""

    keep_last: int | None = None
    """How many newest checkpoints the backend keeps on its own (NVRx's local manager removes every older
    one after a save: 1), so a listing without the older ones is no fault. None: it removes none."""

    layout_hints: Mapping[str, tuple[str, ...]] | None = None
    """{role: (glob, ...)}: the role ("metadata", "data", "pointer") of the files whose names the layout
    learner would misread (resilience.faults.layout). None: every role guessed from the names."""

    io_through_seam: bool = False
    """True when every byte the backend writes or reads goes through resilience.storage: `--io auto` then
    carries its in-process faults in the ranks, without mounting the fault-injecting file system."""

    object_store: bool = False
    """True when it writes to an object store itself when a run keeps checkpoints on one (`--storage s3`):
    there the storage seam's file system is the bucket's (`storage.current().object_url(path)` and
    `.fsspec_options` give the URL and what fsspec/s3fs need to reach it). False: a backend outside the
    seam is refused on an object store, as its files would stay on the local disk."""

    options: tuple[Option, ...] = ()
    """The options its library's users pick (resilience.backends.options.Option), given in a backend
    spec after its name: `dcp:thread_count=4`."""

    writer: str | Mapping[Combination, str] | Callable[[Combination], str | None] | None = None
    """Who writes a save's data files (vocab.phases.WRITER_KINDS): "process" (a process the rank
    starts), "thread" (a thread of the rank) or "inline" (the rank's main thread); one for every
    combination, a mapping {combination string: kind}, or a function of the combination returning one.
    `writer_kill` strikes a writer process only: N/A for the others, with this as the reason. None: learned
    from one clean save's log of who created the files."""

    def writer_for(self, combo: Combination, where: str) -> str | None:
        """The declared writer of `combo`'s data files, or None: not declared. ConfigError naming `where`
        when a function returns no kind."""
        stated = self.writer
        if isinstance(stated, Mapping):
            return stated.get(combo)
        kind = stated(combo) if callable(stated) else stated
        if kind is not None and kind not in WRITER_KINDS:
            raise ConfigError(
                where, f"returned {kind!r} for {combo}", f"return one of {', '.join(WRITER_KINDS)} or None"
            )
        return kind

    def contract_for(self, combo: Combination, where: str, source: str) -> TopologyContract:
        """The contract for `combo`: the stated one (`where` names it in an error; `source` says who
        stated it), else the preset of `combo`."""
        stated = self.contract
        if stated is None:
            return TopologyContract.preset(combo)
        if callable(stated):
            stated = stated(combo)
        return TopologyContract.parse(stated, where=where, source=source)


def traits_of(factory: object, where: str = "backend") -> FactoryTraits:
    """The traits `factory` carries as attributes (FactoryTraits), each checked: a ConfigError whose field
    is `where` and the attribute's name says which is wrong and how to write it. The only reader of
    those attributes."""
    return FactoryTraits(
        combinations=_combinations(getattr(factory, "combinations", None), f"{where}: combinations"),
        contract=_contract(getattr(factory, "contract", None), f"{where}: contract"),
        keep_last=_keep_last(getattr(factory, "keep_last", None), f"{where}: keep_last"),
        layout_hints=_layout_hints(getattr(factory, "layout_hints", None), f"{where}: layout_hints"),
        io_through_seam=_io_through_seam(getattr(factory, "io_through_seam", False), f"{where}: io_through_seam"),
        object_store=_io_through_seam(
            getattr(factory, "object_store", False),
            f"{where}: object_store",
            "set it True only when it writes to the object store storage.current() names",
        ),
        options=_options(getattr(factory, "options", ()), f"{where}: options"),
        writer=_writer(getattr(factory, "writer", None), f"{where}: writer"),
    )


def _combinations(stated: object, where: str) -> tuple[Combination, ...] | None:
    if stated is None or (isinstance(stated, (tuple, list)) and not stated):
        return None  # none declared: all six
    if not isinstance(stated, (tuple, list)):
        raise ConfigError(
            where,
            f"must be a tuple of combination strings, got {stated!r}",
            "write it as factory.combinations = ('LOCAL/torch/sync',)",
        )
    out = []
    for c in stated:
        try:
            out.append(c if isinstance(c, Combination) else Combination.parse(c))
        except ConfigError as e:
            raise ConfigError(where, f"{c!r}: {e.problem}", e.fix) from None
    return tuple(out)


def _contract(stated: object, where: str) -> StatedContract | None:
    if stated is None or callable(stated):
        return stated  # a function of the combination: checked when asked for one
    TopologyContract.parse(stated, where=where)  # a mapping that does not read: one clear error, now
    return stated  # type: ignore[return-value]  # a Mapping: parse refused anything else


def _writer(stated: object, where: str):
    fix = (
        f"write it as factory.writer = 'thread' (one of {', '.join(WRITER_KINDS)}), a mapping of combination "
        "strings to one, or a function of the combination"
    )
    if stated is None or callable(stated):
        return stated
    if isinstance(stated, str):
        if stated not in WRITER_KINDS:
            raise ConfigError(where, f"{stated!r} is no writer kind", fix)
        return stated
    if not isinstance(stated, Mapping):
        raise ConfigError(where, f"must be a string, a mapping or a function, got {type(stated).__name__}", fix)
    out = {}
    for combo, kind in stated.items():
        try:
            key = combo if isinstance(combo, Combination) else Combination.parse(str(combo))
        except ConfigError as e:
            raise ConfigError(where, f"{combo!r}: {e.problem}", e.fix) from None
        if kind not in WRITER_KINDS:
            raise ConfigError(where, f"{kind!r} (for {combo}) is no writer kind", fix)
        out[key] = kind
    return out


def _keep_last(stated: object, where: str) -> int | None:
    if stated is not None and (not isinstance(stated, int) or isinstance(stated, bool) or stated < 1):
        raise ConfigError(
            where,
            f"must be a positive integer, got {stated!r}",
            "give the number of newest checkpoints the backend keeps, or leave keep_last out",
        )
    return stated


def _layout_hints(stated: object, where: str) -> Mapping[str, tuple[str, ...]] | None:
    if stated is None:
        return None
    fix = 'write it as factory.layout_hints = {"metadata": ["*.metadata"]}'
    if not isinstance(stated, Mapping):
        raise ConfigError(where, f"must be a mapping of role to file globs, got {type(stated).__name__}", fix)
    out = {}
    for role, globs in stated.items():
        if (
            not isinstance(role, str)
            or not isinstance(globs, (tuple, list))
            or not all(isinstance(g, str) for g in globs)
        ):
            raise ConfigError(where, f"entry {role!r}: {globs!r} is not a role with a list of globs", fix)
        out[role] = tuple(globs)
    return out


def _io_through_seam(
    stated: object, where: str, fix: str = "set it True only when every file goes through resilience.storage"
) -> bool:
    if not isinstance(stated, bool):
        raise ConfigError(where, f"must be True or False, got {stated!r}", f"{fix}, or leave it out")
    return stated


def _options(stated: object, where: str) -> tuple[Option, ...]:
    if not isinstance(stated, (tuple, list)) or not all(isinstance(o, Option) for o in stated):
        raise ConfigError(
            where,
            f"must be a tuple of Option, got {stated!r}",
            "declare options as resilience.backends.options.Option records",
        )
    return tuple(stated)


def installed(module: str) -> bool:
    """Is the library providing `module` installed? (Finds it without importing it.)"""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False
