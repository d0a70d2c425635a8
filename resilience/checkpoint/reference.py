"""The reference checkpoint implementation: every valid combination, atomic, durable, verified.

Save (every rank): stage -> write own files (fsynced on close) -> fsync folders -> gather results ->
(coordinator) manifest with every file's size and checksum -> rename into place -> fsync -> tracker.
Load: newest candidate first; manifest, topology, then every file's checksum (each file hashed by one
rank); on a failed check warn and fall back to the next older one, or raise when strict."""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from .. import storage
from ..errors import AsyncSaveFailed, CheckpointNotFound, IntegrityError, RankFailure, TopologyChangeRefused
from ..state import Topology, TrainingState
from . import commit, phases
from .combos import CheckpointType, CkptFormat, Combination, combination
from .formats.base import Format, RankInfo
from .manifest import Manifest, save_number, verify_file
from .recorder import recording
from .staging import StagedCopy

log = logging.getLogger("resilience.checkpoint")


@dataclass
class LoadResult:
    iteration: int
    path: str
    rng_restored: bool
    warnings: list[str] = field(default_factory=list)


@dataclass
class CheckpointInfo:
    iteration: int
    path: str
    complete: bool
    manifest: Manifest | None = None
    problem: str = ""


def make_format(combo: Combination) -> Format:
    if combo.type is CheckpointType.LEGACY:
        from .formats.legacy import LegacyFormat
        return LegacyFormat()
    if combo.type is CheckpointType.LOCAL:
        from .formats.local import LocalFormat
        return LocalFormat()
    if combo.format is CkptFormat.TORCH_DIST:
        from .formats.torch_dist import TorchDistFormat
        return TorchDistFormat()
    from .formats.torch_dcp import TorchDcpFormat
    return TorchDcpFormat()


# ---- small collectives that also work with one process and no process group ----------------------
def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def all_gather(obj, group=None) -> list:
    if _world() == 1:
        return [obj]
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


def broadcast(obj, group=None, src: int = 0):
    if _world() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class _Pending:
    """An async save whose files are being written by a background thread."""

    def __init__(self, iteration: int, root: str, staging: str):
        self.iteration, self.root, self.staging = iteration, root, staging
        self.thread: threading.Thread | None = None
        self.files: dict = {}
        self.error: str | None = None


class ReferenceBackend:
    """Save / finalize / load / list for one valid combination. Every method is collective."""

    def __init__(self, combo: Combination, *, keep_last: int | None = None, strict: bool = False):
        # Combination(...) itself does not validate: reject an invalid one here, before any byte is written
        self.combo = combo = combination(combo.type, combo.format, combo.io)
        self.format = make_format(combo)
        self.keep_last = keep_last
        self.strict = strict
        self.name = f"reference:{combo}"
        self._pending: _Pending | None = None
        self._async_group = None
        self._staging_buffers: dict[str, torch.Tensor] = {}  # async: host copies reused from save to save
        self._local_saves: dict[str, int] = {}  # LOCAL: root -> the number of the newest save known of

    # ---- save ------------------------------------------------------------------------------------
    def _info(self, state: TrainingState, group=None) -> RankInfo:
        return RankInfo(_rank(), _world(), state.topo, state.coords, state.spec, self.combo, group,
                        state.groups.dp_group)

    def save(self, state: TrainingState, root: str) -> None:
        """Sync: returns once the checkpoint is committed. Async: returns once the state is staged;
        a save still in flight is finalized first (waits)."""
        if self._pending is not None:
            self.finalize()
        root = os.path.abspath(root)
        if self.format.layout == "local":
            return self._save_local(state, root)
        iteration = state.iteration
        staging = None
        if _rank() == 0:
            commit.ensure_dir(root, os.path.dirname(root))
            staging = os.path.join(root, commit.staging_name(iteration))
        staging = broadcast(staging)
        phases.reached("staging", iteration=iteration, path=staging)
        records = state.sharded_state_dict()
        if self.combo.is_async:
            return self._start_async(state, records, root, staging)
        info = self._info(state)
        files, error = self._write(info, records, staging)
        self._commit(state, iteration, root, staging, files, error)

    def _write(self, info: RankInfo, records, staging: str) -> tuple[dict, str | None]:
        """`records`, or a function returning them (an async snapshot that is still being copied)."""
        try:
            with recording() as rec:
                error = None
                try:
                    if callable(records):
                        records = records()
                    phases.reached("write", path=staging)
                    storage.current().mkdir(staging)
                except Exception as e:
                    error = _describe(e)
                if self.format.layout == "global":
                    # a format's collectives must not start unless every rank is there to join them
                    if any(all_gather(error, info.group)):
                        return {}, error
                elif error:
                    return {}, error
                self.format.write(info, records, staging)
            commit.fsync_tree_dirs(staging)
            return rec.files(staging), None
        except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
            log.debug("rank %d write failed", info.rank, exc_info=True)
            return {}, _describe(e)

    def _commit(self, state: TrainingState, iteration: int, root: str, staging: str, files: dict,
                error: str | None, group=None) -> None:
        gathered = all_gather((files, error), group)
        outcome: tuple[str, dict[int, Any] | None] | None = None
        if _rank() == 0:
            failures = {r: err for r, (_, err) in enumerate(gathered) if err}
            if failures:
                storage.current().rmtree(staging)
                outcome = ("failed", failures)
            else:
                try:
                    merged = {}
                    for per_rank, _ in gathered:
                        merged.update(per_rank)
                    phases.reached("manifest", iteration=iteration, path=staging)
                    Manifest(self.combo.to_dict(), state.topo.to_dict(), state.spec.to_dict(), iteration,
                             merged).write(staging)
                    storage.current().fsync_dir(staging)
                    phases.reached("commit_rename", iteration=iteration, path=staging)
                    commit.publish(staging, os.path.join(root, commit.iter_name(iteration)))
                    phases.reached("tracker_update", iteration=iteration, path=root)
                    commit.write_tracker(root, iteration)
                    if self.keep_last:
                        phases.reached("retention", iteration=iteration, path=root)
                        commit.apply_retention(root, self.keep_last, iteration)
                    outcome = ("ok", None)
                except Exception as e:
                    outcome = ("failed", {0: _describe(e)})
        status, failures = broadcast(outcome, group)
        if status != "ok":
            cls = AsyncSaveFailed if self.combo.is_async else RankFailure
            raise cls(failures, f"save of iteration {iteration} failed, nothing committed")

    # ---- async -----------------------------------------------------------------------------------
    def _start_async(self, state: TrainingState, records, root: str, staging: str) -> None:
        if self._async_group is None and _world() > 1:
            # the background writer's collectives must not interleave with training's on one group
            self._async_group = dist.new_group(backend="gloo")
        # the previous save's writer has finished (save() finalized it), so its buffers are free to reuse;
        # the copy runs on the writer thread, and the training step copies first what it is about to change
        snapshot = StagedCopy(records, self._staging_buffers)
        info = self._info(state, self._async_group)
        prepare = getattr(self.format, "prepare", None)
        if prepare is not None:  # a format's collective set-up (device meshes, groups) stays on this thread
            prepare(info)
        pending = _Pending(state.iteration, root, staging)

        def write():
            pending.files, pending.error = self._write(info, snapshot.copy_all, staging)

        pending.thread = threading.Thread(target=write, name=f"ckpt-writer-{state.iteration}", daemon=True)
        state.write_guard = snapshot
        pending.thread.start()
        self._pending = pending
        self._pending_state = state

    def finalize(self, *, blocking: bool = True) -> bool:
        """Commit a finished async save. Non-blocking: returns False while the write still runs (on any
        rank). A failed background write raises AsyncSaveFailed here, on every rank."""
        pending = self._pending
        if pending is None:
            return True
        if not blocking:
            done = all(all_gather(not pending.thread.is_alive(), self._async_group))  # type: ignore[union-attr]
            if not done:
                return False
        phases.reached("async_finalize", iteration=pending.iteration, path=pending.staging)
        pending.thread.join()  # type: ignore[union-attr]  # _start_async set it
        self._pending = None
        if getattr(self._pending_state, "write_guard", None) is not None:
            self._pending_state.write_guard = None  # the writer has copied everything
        self._commit(self._pending_state, pending.iteration, pending.root, pending.staging, pending.files,
                     pending.error, self._async_group)
        return True

    @property
    def in_flight(self) -> bool:
        return self._pending is not None

    @property
    def in_flight_iteration(self) -> int | None:
        """The iteration of the async save still being written (CheckpointBackend protocol)."""
        return self._pending.iteration if self._pending is not None else None

    # ---- local layout ------------------------------------------------------------------------------
    def _local_root(self, root: str, rank: int) -> str:
        return os.path.join(root, "local", f"rank_{rank:05d}")

    def _save_local(self, state: TrainingState, root: str) -> None:
        """No collective and no rank-0 dependency: each rank commits its own folder.

        Each save is numbered alike on every rank without a collective: ranks save in the same order, and
        a load (which agrees across ranks) sets the count past every number on any rank, so two different
        saves never share one; before any load the count starts after this rank's own saves (none in a
        fresh run). A re-save keeps the copy it replaces: another rank may still hold only that one, and a
        load picks the newest (iteration, number) every rank holds."""
        rank_root = self._local_root(root, _rank())
        fs = storage.current()
        if root not in self._local_saves:  # neither loaded nor saved here yet
            self._local_saves[root] = max(_save_numbers(rank_root, root), default=0)
        self._local_saves[root] += 1  # counted before anything can fail, so that every rank counts every save
        number = self._local_saves[root]
        commit.ensure_dir(rank_root, root)
        staging = os.path.join(rank_root, commit.staging_name(state.iteration))
        phases.reached("staging", iteration=state.iteration, path=staging)
        files, error = self._write(self._info(state), state.sharded_state_dict(), staging)
        if error:
            fs.rmtree(staging)
            raise RankFailure({_rank(): error}, f"local save of iteration {state.iteration} failed")
        phases.reached("manifest", iteration=state.iteration, path=staging)
        Manifest(self.combo.to_dict(), state.topo.to_dict(), state.spec.to_dict(), state.iteration, files,
                 {"rank": _rank(), "save": number}).write(staging)
        fs.fsync_dir(staging)
        phases.reached("commit_rename", iteration=state.iteration, path=staging)
        commit.publish(staging, os.path.join(rank_root, commit.iter_name(state.iteration)), keep_replaced=True)
        phases.reached("tracker_update", iteration=state.iteration, path=rank_root)
        commit.write_tracker(rank_root, state.iteration)
        if self.keep_last:
            phases.reached("retention", iteration=state.iteration, path=rank_root)
            # Another rank may not have committed this iteration (no collective here), so the newest
            # checkpoint every rank has may be the previous one: keep one more than asked.
            commit.apply_retention(rank_root, self.keep_last + 1, state.iteration)

    # ---- load ------------------------------------------------------------------------------------
    def load(self, state: TrainingState, root: str) -> LoadResult:
        """Load the newest valid checkpoint under `root` into `state`."""
        if self._pending is not None:
            self.finalize()
        root = os.path.abspath(root)
        if self.format.layout == "local":
            return self._load_local(state, root)
        warnings: list[str] = []
        plan: tuple[list[tuple], tuple | None] | IntegrityError | None = None
        if _rank() == 0:
            try:  # decided here, then sent to every rank: an error here must reach them all, not hang them
                plan = self._candidates(root, warnings)
            except Exception as e:
                plan = IntegrityError(root, "checkpoint listing", _describe(e))
        plan, warnings = broadcast((plan, warnings))
        if isinstance(plan, IntegrityError):
            raise plan
        candidates, tracker = plan
        if tracker is not None and self.strict:
            raise IntegrityError(*tracker)
        info = self._info(state)
        for iteration, path, manifest, problem in candidates:
            if problem is None:
                problem = self._check_candidate(info, path, manifest)
            if problem is not None:
                self._fallback(warnings, path, problem)
                continue
            objects = self._read(info, state, path, manifest, warnings)
            if objects is None:
                continue
            state.load_objects(objects)
            return LoadResult(iteration, path, "rng" in objects, warnings)
        raise CheckpointNotFound(f"{root}: no loadable {self.combo} checkpoint"
                                 + ("".join(f"\n  {w}" for w in warnings) if warnings else ""))

    def _candidates(self, root: str, warnings: list[str]) -> tuple[list[tuple], tuple | None]:
        """(iteration, path, manifest or None, problem or None), newest first, and the tracker's problem
        as (path, check, detail) or None (coordinator)."""
        found = commit.list_iterations(root)
        bad_tracker = commit.check_tracker(root, [it for it, _ in found])
        tracker = None
        if bad_tracker is not None:
            warnings.append(f"{bad_tracker}; scanning the folders instead")
            tracker = (bad_tracker.path, bad_tracker.check, bad_tracker.detail)
        out = []
        for iteration, path in found:
            try:
                manifest = Manifest.read(path, root)
                problem = None
                if manifest.iteration != iteration:
                    raise IntegrityError(path, "iteration", f"manifest says {manifest.iteration}")
            except IntegrityError as e:
                manifest, problem = None, str(e)
            except Exception as e:  # whatever a hostile folder makes of the reader, it is that folder's fault
                manifest, problem = None, str(IntegrityError(path, "manifest", _describe(e)))
            out.append((iteration, path, manifest, problem))
        return out, tracker

    def _fallback(self, warnings: list[str], path: str, problem: str) -> None:
        if self.strict:
            raise IntegrityError(path, "checkpoint", problem)
        msg = f"{problem}; falling back to an older checkpoint"
        warnings.append(msg)
        if _rank() == 0:
            log.warning(msg)

    def _check_candidate(self, info: RankInfo, path: str, manifest: Manifest) -> str | None:
        """None if every file checks out (each file hashed by one rank); else the first problem.
        A topology the combination cannot load on raises: an older checkpoint would not help."""
        saved = (manifest.combination.get("type"), manifest.combination.get("format"))
        if saved != (self.combo.type.value, self.combo.format.value):  # sync and async read each other
            raise TopologyChangeRefused(
                f"{path}: written as {manifest.combination}, cannot be read as {self.combo}")
        self.format.check_topology(Topology.from_dict(manifest.topology), info)
        if manifest.model != state_model(info):
            raise TopologyChangeRefused(f"{path}: saved with model {manifest.model}, loading {state_model(info)}")
        problem = None
        for i, (rel, expected) in enumerate(sorted(manifest.files.items())):
            if i % info.world == info.rank:
                try:
                    verify_file(path, rel, expected)
                except Exception as e:  # every rank must reach the all_gather below, whatever failed
                    problem = str(e) if isinstance(e, IntegrityError) else \
                        str(IntegrityError(os.path.join(path, rel), "verify", _describe(e)))
                    break
        problems = [p for p in all_gather(problem) if p]
        return problems[0] if problems else None

    def _read(self, info: RankInfo, state: TrainingState, path: str, manifest: Manifest, warnings) -> dict | None:
        records = state.sharded_state_dict()
        error: Exception | None = None
        objects = {}
        try:
            objects = self.format.read(info, records, path, manifest)
        except TopologyChangeRefused as e:
            error = e
        except Exception as e:
            error = IntegrityError(path, "read", _describe(e))
        errors = [e for e in all_gather(str(error) if error else None) if e]
        if isinstance(error, TopologyChangeRefused):
            raise error
        if errors:
            self._fallback(warnings, path, errors[0])
            return None
        return objects

    def _load_local(self, state: TrainingState, root: str) -> LoadResult:
        """Each rank checks its own copies (committed, and those a re-save replaced); the newest
        (iteration, save number) valid on every rank is loaded: one whole save, never a re-save that
        reached some ranks mixed with the save it replaced on the others."""
        info = self._info(state)
        rank_root = self._local_root(root, info.rank)
        valid: dict[tuple[int, int], tuple[str, Manifest]] = {}  # (iteration, save number) -> its copy
        warnings: list[str] = []
        refused: str | None = None
        numbers = [0]
        found = commit.list_iterations(rank_root) + commit.list_replaced(rank_root)  # committed ones first
        tracker = commit.check_tracker(rank_root, [it for it, _ in found])
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
                if manifest.model != state_model(info):
                    raise TopologyChangeRefused(f"{path}: saved with model {manifest.model}, "
                                                f"loading {state_model(info)}")
                for rel, expected in manifest.files.items():
                    verify_file(path, rel, expected)
                valid.setdefault((iteration, number), (path, manifest))
            except TopologyChangeRefused as e:
                refused = str(e)
            except IntegrityError as e:
                warnings.append(f"rank {info.rank}: {e}")
            except Exception as e:  # every rank must reach the all_gather below
                warnings.append(f"rank {info.rank}: {IntegrityError(path, 'checkpoint', _describe(e))}")
        gathered = all_gather((sorted(valid), warnings, refused, max(numbers)))
        # the saves after this load are numbered past every save on any rank, even one not loadable
        self._local_saves[root] = max([self._local_saves.get(root, 0)] + [n for *_, n in gathered])
        refusals = [r for _, _, r, _ in gathered if r]
        if refusals:
            raise TopologyChangeRefused(refusals[0])
        common = set(gathered[0][0])
        for keys, _, _, _ in gathered[1:]:
            common &= set(keys)
        all_warnings = [w for _, ws, _, _ in gathered for w in ws]
        newest_anywhere = max((max(keys) for keys, _, _, _ in gathered if keys), default=None)
        for key in sorted(common, reverse=True):
            if newest_anywhere is not None and key < newest_anywhere:
                all_warnings.append(_not_on_every_rank(newest_anywhere, key))
                newest_anywhere = None
            if self.strict and all_warnings:
                raise IntegrityError(root, "local checkpoint", "; ".join(all_warnings))
            path, manifest = valid[key]
            objects = self._read(info, state, path, manifest, all_warnings)
            if objects is not None:
                state.load_objects(objects)
                return LoadResult(key[0], path, "rng" in objects, all_warnings)
        raise CheckpointNotFound(f"{root}: no local checkpoint present and valid on every rank"
                                 + "".join(f"\n  {w}" for w in all_warnings))

    # ---- listing -----------------------------------------------------------------------------------
    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        """Every checkpoint folder under `root` (this process, no collective), newest first."""
        return list_checkpoints(root)


def _not_on_every_rank(newest: tuple[int, int], loading: tuple[int, int]) -> str:
    if newest[0] != loading[0]:
        return f"iteration {newest[0]} is not present and valid on every rank; loading iteration {loading[0]}"
    return (f"the latest save of iteration {newest[0]} (save {newest[1]}) is not present and valid on every "
            f"rank; loading the earlier save of iteration {loading[0]} (save {loading[1]}) that every rank holds")


def _save_numbers(rank_root: str, root: str) -> list[int]:
    """The numbers of the LOCAL saves in one rank's folder whose manifest reads (this process only)."""
    out: list[int] = []
    try:
        found = commit.list_iterations(rank_root) + commit.list_replaced(rank_root)
    except OSError:  # an unreadable folder fails the save itself; the count must still go on
        return out
    for _, path in found:
        try:
            manifest = Manifest.read(path, root)
            out.append(save_number(manifest, path))
        except Exception:  # a copy whose manifest does not read never loads: its number may be reused
            continue
    return out


def state_model(info: RankInfo) -> dict:
    return info.spec.to_dict()


def list_checkpoints(root: str) -> list[CheckpointInfo]:
    """Global and local checkpoints under `root` with completeness and integrity (single process)."""
    out = []
    roots = [root]
    local = os.path.join(root, "local")
    if storage.current().is_dir(local):
        roots += [os.path.join(local, n) for n in storage.current().listdir(local)]
    for r in roots:
        for iteration, path in commit.list_iterations(r) + commit.list_replaced(r):
            try:
                manifest = Manifest.read(path, root)
                for rel, expected in manifest.files.items():
                    verify_file(path, rel, expected)
                out.append(CheckpointInfo(iteration, path, True, manifest))
            except (IntegrityError, ValueError, OverflowError) as e:
                out.append(CheckpointInfo(iteration, path, False, None, str(e)))
    return sorted(out, key=lambda c: -c.iteration)  # newest first, as the protocol says; ranks' copies in order
