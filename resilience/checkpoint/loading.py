"""The reference's load: the newest valid checkpoint, falling back past damaged ones.

Global: the coordinator lists the candidates, newest first (the tracker is a hint: a bad one is a
warning); for each, every rank checks the manifest, the topology and the model, then every listed
file's checksum (each file hashed by one rank, the one that reads it when the format says which), and
all ranks agree on the outcome before any rank reads a file another rank checked (checkpoint.verified):
in the format's own plan step when it has a collective one (DCP's), else in a collective here. A rank
keeps the files it hashed in memory and loads from there, parsing tensors in place (storage.torch_load),
so each byte is read from disk once and copied once. Agreements cost one small all-reduce when every
rank is fine; the problems are gathered only when one is not.
LOCAL: each rank checks its own copies; the newest save every rank holds valid is read
(vocab.on_every_rank). A failed check warns and falls back to the next older one, or raises when strict;
a topology the combination cannot load on raises at once (an older checkpoint would not help)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from .. import storage
from ..dist import all_agree, all_gather, broadcast, this_rank
from ..errors import CheckpointNotFound, IntegrityError, TopologyChangeRefused
from ..state import Topology, TrainingState
from ..state.precision import Precision
from ..storage.held import HeldFiles
from ..vocab import LoadResult, on_every_rank
from ..vocab.folders import rank_root
from . import commit
from .driver import Driver, describe, log, model_problem, saved_precision
from .formats.base import RankInfo
from .manifest import Manifest, save_number, verify_file
from .verified import VerifiedFiles


class FallbackLoad(Driver):
    """Every method is collective except where it says (coordinator)."""

    # ---- global ------------------------------------------------------------------------------------
    def _load_global(self, state: TrainingState, root: str) -> LoadResult:
        warnings: list[str] = []
        plan: tuple[list[tuple], tuple | None] | IntegrityError | None = None
        if this_rank() == 0:
            try:  # decided here, then sent to every rank: an error here must reach them all, not hang them
                plan = self._candidates(root, warnings)
            except Exception as e:
                plan = IntegrityError(root, "checkpoint listing", describe(e))
        plan, warnings = broadcast((plan, warnings))
        if isinstance(plan, IntegrityError):
            raise plan
        candidates, tracker = plan  # type: ignore[misc]  # rank 0 made it: never None
        if tracker is not None and self.strict:
            raise IntegrityError(*tracker)
        info = self._info(state)
        for iteration, path, manifest, problem in candidates:
            files = None
            if problem is None:
                files, problem = self._check_candidate(info, path, manifest)
            if problem is not None:
                self._fallback(warnings, path, problem)
                continue
            objects = self._read(info, state, path, manifest, warnings, held=files)
            del files  # the bytes this rank read: free before an older candidate is read
            if objects is None:
                continue
            state.load_objects(objects)
            return LoadResult(iteration, path, "rng" in objects, warnings)
        raise CheckpointNotFound(
            f"{root}: no loadable {self.combo} checkpoint" + ("".join(f"\n  {w}" for w in warnings) if warnings else "")
        )

    def _candidates(self, root: str, warnings: list[str]) -> tuple[list[tuple], tuple | None]:
        """(iteration, path, manifest or None, problem or None), newest first, and the tracker's problem
        as (path, check, detail) or None (coordinator)."""
        found = commit.list_iterations(root)
        if not getattr(storage.current(), "atomic_rename", True):
            # an object store: after each committed copy, the one a re-save set aside (while the re-save is
            # being copied in, the one whole copy of that iteration)
            found = sorted(found + commit.list_replaced(root), key=lambda f: f[0], reverse=True)
        bad_tracker = commit.check_tracker(root, [it for it, _ in found])
        tracker = None
        if bad_tracker is not None:
            warnings.append(f"{bad_tracker}; scanning the folders instead")
            tracker = (bad_tracker.path, bad_tracker.check, bad_tracker.detail)
        out: list[tuple] = []
        for iteration, path in found:
            manifest: Manifest | None
            try:
                manifest = Manifest.read(path, root)
                problem = None
                if manifest.iteration != iteration:
                    raise IntegrityError(path, "iteration", f"manifest says {manifest.iteration}")
            except IntegrityError as e:
                manifest, problem = None, str(e)
            except Exception as e:  # whatever a hostile folder makes of the reader, it is that folder's fault
                manifest, problem = None, str(IntegrityError(path, "manifest", describe(e)))
            out.append((iteration, path, manifest, problem))
        return out, tracker

    def _fallback(self, warnings: list[str], path: str, problem: str) -> None:
        if self.strict:
            raise IntegrityError(path, "checkpoint", problem)
        msg = f"{problem}; falling back to an older checkpoint"
        warnings.append(msg)
        if this_rank() == 0:
            log.warning(msg)

    def _check_candidate(self, info: RankInfo, path: str, manifest: Manifest) -> tuple[VerifiedFiles, str | None]:
        """The files of the candidate as its load reads them (checkpoint.verified), and None if every file
        checks out (each file hashed by one rank), else the first problem, the same on every rank. A format
        whose read plans collectively (`collective_plan`) has them checked in its plan step instead: None
        here, no collective. A topology the combination cannot load on raises: an older checkpoint would
        not help."""
        saved = (manifest.combination.get("type"), manifest.combination.get("format"))
        if saved != (self.combo.type.value, self.combo.format.value):  # sync and async read each other
            raise TopologyChangeRefused(f"{path}: written as {manifest.combination}, cannot be read as {self.combo}")
        self.format.check_topology(Topology.from_dict(manifest.topology), info)
        if (wrong := model_problem(manifest.model, info)) is not None:
            raise TopologyChangeRefused(f"{path}: {wrong}")
        owners = readers(manifest.files, info, self.format)
        files = VerifiedFiles(storage.current(), path, manifest.files, [f for f, r in owners.items() if r == info.rank])
        if getattr(self.format, "collective_plan", False):
            return files, None
        with contextlib.suppress(IntegrityError):  # kept in files.problem, agreed on below
            files.verify_owned()
        return files, agreed(str(files.problem) if files.problem else None)

    def _read(
        self,
        info: RankInfo,
        state: TrainingState,
        path: str,
        manifest: Manifest,
        warnings,
        held: HeldFiles | None = None,
    ) -> dict | None:
        saved = saved_precision(manifest.model, state)
        records, convert = self._records_as_saved(state, saved)
        error: Exception | None = None
        objects = {}
        try:
            with _served(held):
                objects = self.format.read(info, records, path, manifest)
        except TopologyChangeRefused as e:
            error = e
        except Exception as e:
            error = IntegrityError(path, "read", describe(e))
        # a failed check is the cause of the read's failure on every rank (checked in the plan step)
        problem = held.problem if isinstance(held, VerifiedFiles) else None
        if error is None and isinstance(held, VerifiedFiles) and not held.checked_owned:
            error = IntegrityError(path, "verify", f"{self.format.__class__.__name__} read before checking its files")
        first = agreed(str(problem) if problem else None, str(error) if error else None)
        if isinstance(error, TopologyChangeRefused):
            raise error
        if first is not None:
            self._fallback(warnings, path, first)
            return None
        convert()  # on every rank (it may gather rows), once every rank has read
        warnings.extend(self._said_of_precision(path, saved, state.spec.precision))
        return objects

    def _records_as_saved(self, state: TrainingState, precision: Precision):
        """The records a checkpoint saved in `precision` holds, and the step that moves what was read into
        `state` (state.records_in_precision)."""
        return state.records_in_precision(precision)

    def _said_of_precision(self, path: str, saved: Precision, live: Precision) -> list[str]:
        """What the load tells its user of a precision change: the parameters' conversion is exact (a log
        record); moments rounded from fp32 into bf16 lose precision, which the user must hear (a warning)."""
        if saved.params != live.params and this_rank() == 0:
            log.info(
                "%s: parameters saved in %s, loaded into %s exactly (from the fp32 %s)",
                path,
                saved.params,
                live.params,
                "main parameters" if saved.params == "bf16" else "parameters",
            )
        if saved.rounds_moments_to(live):
            return [f"optimizer moments (exp_avg, exp_avg_sq) saved in fp32, rounded into bf16: precision lost: {path}"]
        return []

    # ---- LOCAL -------------------------------------------------------------------------------------
    def _load_local(self, state: TrainingState, root: str) -> LoadResult:
        """Each rank checks its own copies (committed, and those a re-save replaced); the newest
        (iteration, save number) valid on every rank is loaded: one whole save, never a re-save that
        reached some ranks mixed with the save it replaced on the others."""
        info = self._info(state)
        folder = rank_root(root, info.rank)
        valid: dict[tuple[int, int], tuple[str, Manifest]] = {}  # (iteration, save number) -> its copy
        newest: tuple[tuple[int, int], HeldFiles] | None = None  # the bytes of the newest valid copy, read once
        warnings: list[str] = []
        refused: str | None = None
        numbers = [0]
        found = commit.list_iterations(folder) + commit.list_replaced(folder)  # committed ones first
        tracker = commit.check_tracker(folder, [it for it, _ in found])
        if tracker is not None:
            warnings.append(f"rank {info.rank}: {tracker}; scanning the folders instead")
        for iteration, path in found:
            try:
                manifest = Manifest.read(path, root)  # a rank folder that leads outside `root` is refused too
                number = save_number(manifest, path)
                numbers.append(number)
                if manifest.iteration != iteration:  # an intact older checkpoint under a newer name
                    raise IntegrityError(path, "iteration", f"manifest says {manifest.iteration}")
                self.format.check_topology(Topology.from_dict(manifest.topology), info)
                if (wrong := model_problem(manifest.model, info)) is not None:
                    raise TopologyChangeRefused(f"{path}: {wrong}")
                held = HeldFiles(storage.current())
                for rel, expected in manifest.files.items():
                    data = verify_file(path, rel, expected, True)
                    if data is not None:
                        held.hold(os.path.join(path, rel), data)
                valid.setdefault((iteration, number), (path, manifest))
                if (newest is None or (iteration, number) > newest[0]) and valid[(iteration, number)][0] == path:
                    newest = ((iteration, number), held)
                del held
            except TopologyChangeRefused as e:
                refused = str(e)
            except IntegrityError as e:
                warnings.append(f"rank {info.rank}: {e}")
            except Exception as e:  # every rank must reach the all_gather below
                warnings.append(f"rank {info.rank}: {IntegrityError(path, 'checkpoint', describe(e))}")
        gathered = all_gather((sorted(valid), warnings, refused, max(numbers)))
        # the saves after this load are numbered past every save on any rank, even one not loadable
        self._local_saves[root] = max([self._local_saves.get(root, 0)] + [n for *_, n in gathered])
        refusals = [r for _, _, r, _ in gathered if r]
        if refusals:
            raise TopologyChangeRefused(refusals[0])
        all_warnings = [w for _, ws, _, _ in gathered for w in ws]
        newest_anywhere = max((max(keys) for keys, _, _, _ in gathered if keys), default=None)
        for key in on_every_rank(keys for keys, _, _, _ in gathered):
            if newest_anywhere is not None and key < newest_anywhere:
                all_warnings.append(_not_on_every_rank(newest_anywhere, key))
                newest_anywhere = None
            if self.strict and all_warnings:
                raise IntegrityError(root, "local checkpoint", "; ".join(all_warnings))
            path, manifest = valid[key]
            kept = newest[1] if newest is not None and newest[0] == key else None
            objects = self._read(info, state, path, manifest, all_warnings, held=kept)
            if objects is not None:
                state.load_objects(objects)
                return LoadResult(key[0], path, "rng" in objects, all_warnings)
        raise CheckpointNotFound(
            f"{root}: no local checkpoint present and valid on every rank" + "".join(f"\n  {w}" for w in all_warnings)
        )


def readers(files: dict[str, dict], info: RankInfo, fmt) -> dict[str, int]:
    """The rank that hashes each listed file (and loads it from memory): the one the format names as
    its reader (`reader_of(rel, info)`, optional), else the rank with the fewest bytes so far, largest
    files first. The same on every rank: it depends only on the manifest and the topology."""
    reader_of = getattr(fmt, "reader_of", None)
    out: dict[str, int] = {}
    load = [0] * info.world
    rest = []
    for rel, expected in sorted(files.items()):
        rank = reader_of(rel, info) if reader_of is not None else None
        if isinstance(rank, int) and 0 <= rank < info.world:
            out[rel] = rank
            load[rank] += expected["size"]
        else:
            rest.append((rel, expected["size"]))
    for rel, size in sorted(rest, key=lambda item: (-item[1], item[0])):
        rank = min(range(info.world), key=lambda r: (load[r], r))
        out[rel] = rank
        load[rank] += size
    return out


def agreed(*problems: str | None) -> str | None:
    """The first problem of any rank, the same on every rank (None when no rank has one): one small
    all-reduce when none has, a gather only when some has. Each rank passes its problems in order of
    precedence: a rank's first kind of problem wins over any rank's second (a failed check over the read
    error it caused elsewhere)."""
    if all_agree(not any(problems)):
        return None
    everyone = all_gather(problems)
    for kind in range(len(problems)):
        for mine in everyone:
            if mine[kind]:
                return mine[kind]
    return None  # unreachable: some rank had one


@contextlib.contextmanager
def _served(held: HeldFiles | None) -> Iterator[None]:
    """This thread reads through `held` (the files it holds from memory) for the duration."""
    if held is None:
        yield
        return
    with storage.use(held, this_thread=True):
        yield


def _not_on_every_rank(newest: tuple[int, int], loading: tuple[int, int]) -> str:
    if newest[0] != loading[0]:
        return f"iteration {newest[0]} is not present and valid on every rank; loading iteration {loading[0]}"
    return (
        f"the latest save of iteration {newest[0]} (save {newest[1]}) is not present and valid on every "
        f"rank; loading the earlier save of iteration {loading[0]} (save {loading[1]}) that every rank holds"
    )
