"""The checkpoint backend protocol: what any checkpoint implementation provides to be tested here.

A backend is made for one combination by a factory, `factory(combo) -> backend`, named on the command
line as `--backend package.module:factory` (`resilience run`, `resilience matrix`, the pytest plugin:
all of them go through `resilience.runner.adapters.make_backend`). The reference implementation is one
such backend; so are the adapters in this package and the deliberately broken ones.

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
`in_flight_iteration = None`. A factory may carry `combinations`, the combination strings it supports
(`resilience matrix` runs those when --combos is not given); it raises ConfigError for any other."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..errors import ConfigError
from ..state import TrainingState
from ..vocab import CheckpointInfo, LoadResult

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


def installed(module: str) -> bool:
    """Is the library providing `module` installed? (Finds it without importing it.)"""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False
