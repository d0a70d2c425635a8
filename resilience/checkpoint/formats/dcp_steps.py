"""dcp.save's and dcp.load's steps, run as Megatron-core's torch_dist strategy runs them: for a save,
every rank plans its writes, the coordinator joins the plans and writes `.metadata`, and only the outcome
comes back to every rank; for a load, every rank plans and reads its own part, and the ranks agree on the
outcome after each step.

The files and what is read are dcp.save's and dcp.load's (the same planners, storage writer and reader).
What differs is the traffic: DCP learns the size of every pickled plan with an all-gather (a ring: its
cost on each rank grows with the world), ends a save by sending the whole checkpoint's metadata to every
rank (on W ranks each rank unpickles the pieces of all W) and a load by an all-gather of every rank's
result. Here a rank sends its plan and write results to the coordinator and gets back its own plan and a
verdict; a load's steps end in one small all-reduce each when no rank failed."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, cast

import torch.distributed as tdist
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from ...dist import broadcast, gather, gather_failures, scatter, world_size
from ...errors import RankFailure


def _said(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"  # how a failed rank is named in RankFailure


def _where(group: Any) -> tuple[int, int]:
    """(the global rank of the group's coordinator, this rank's rank in the group)."""
    if world_size() == 1:
        return 0, 0
    group = group if group is not None else tdist.group.WORLD
    return tdist.get_global_rank(group, 0), tdist.get_group_rank(group, tdist.get_rank())


def save(state_dict: dict, writer: StorageWriter, planner: SavePlanner, group: Any = None, what: str = "save") -> None:
    """Collective over `group`: write `state_dict` as dcp.save would. A failure on any rank raises
    RankFailure on every rank, naming each failed rank (the plan's failures before any byte is written)."""
    src, rank = _where(group)
    coordinator = rank == 0
    plan: SavePlan | None = None
    error = None
    try:
        planner.set_up_planner(state_dict=state_dict, storage_meta=writer.storage_meta(), is_coordinator=coordinator)
        writer.set_up_storage_writer(coordinator, rank=rank, use_collectives=True)
        plan = writer.prepare_local_plan(planner.create_local_plan())
    except Exception as e:
        error = _said(e)
    plans = gather((plan, error), group)
    per_rank: list | None = None
    metadata = None
    if plans is not None:
        failures: dict[int, str] = {r: err for r, (_, err) in enumerate(plans) if err}
        if not failures:
            try:
                central, metadata = planner.create_global_plan([cast(SavePlan, p) for p, _ in plans])
                per_rank = writer.prepare_global_plan(central)
            except Exception as e:
                failures = {0: _said(e)}
        if failures:
            per_rank = [failures] * len(plans)
    mine = scatter(per_rank, group)
    if isinstance(mine, dict):
        raise RankFailure(mine, f"{what}: plan")
    results, error = None, None
    try:
        writes = writer.write_data(planner.finish_plan(mine), planner)
        writes.wait()
        results = writes.value()
    except Exception as e:
        error = _said(e)
    written = gather((results, error), group)
    outcome: dict[int, str] | None = None
    if written is not None:
        outcome = {r: err for r, (_, err) in enumerate(written) if err}
        if not outcome:
            try:
                writer.finish(metadata=cast(Metadata, metadata), results=[cast(list, r) for r, _ in written])
            except Exception as e:
                outcome = {0: _said(e)}
    failed = broadcast(outcome, group, src=src)
    if failed:
        raise RankFailure(failed, f"{what}: write")


def _parts(metadata: Metadata, wanted: list[list[str]]) -> list[tuple[bytes, list[bytes]]]:
    """For each rank, the metadata of the keys it asked for (each key's entry and where its chunks are
    stored), pickled once per key: ranks share keys (replicas, a dense layer's pieces), and pickling a
    part per rank would cost the coordinator the pickling of the whole metadata many times over."""
    stored: dict[str, dict] = {}
    for index, info in (metadata.storage_data or {}).items():
        stored.setdefault(index.fqn, {})[index] = info
    base = pickle.dumps(dataclasses.replace(metadata, state_dict_metadata={}, storage_data={}))
    entries = metadata.state_dict_metadata
    per_key: dict[str, bytes] = {}
    out = []
    for keys in wanted:
        for k in keys:
            if k in entries and k not in per_key:
                per_key[k] = pickle.dumps((k, entries[k], stored.get(k, {})))
        out.append((base, [per_key[k] for k in keys if k in per_key]))
    return out


def _joined(part: tuple[bytes, list[bytes]]) -> Metadata:
    base, keys = part
    metadata = pickle.loads(base)  # the coordinator's own pickling of what it read and checked (safe_pickle)
    for blob in keys:
        key, entry, stored = pickle.loads(blob)
        metadata.state_dict_metadata[key] = entry
        metadata.storage_data.update(stored)
    return metadata


def _metadata_of(reader: StorageReader, keys: list[str], group: Any) -> tuple[Metadata | None, str | None]:
    """(this rank's part of the checkpoint's metadata, or the coordinator's error reading it): read and
    checked once, on the coordinator, instead of on every rank (each would unpickle the chunks of all)."""
    wanted = gather(keys, group)
    per_rank: list | None = None
    if wanted is not None:
        try:
            per_rank = _parts(reader.read_metadata(), wanted)
        except Exception as e:
            per_rank = [_said(e)] * len(wanted)
    mine = scatter(per_rank, group)
    return (None, mine) if isinstance(mine, str) else (_joined(mine), None)


def load(
    state_dict: dict,
    reader: StorageReader,
    planner: LoadPlanner,
    group: Any = None,
    what: str = "load",
    keys: list[str] | None = None,
) -> None:
    """Collective over `group`: read into `state_dict` as dcp.load would (its planner fills it). A failure
    on any rank raises RankFailure on every rank, naming each failed rank (a plan's, before any rank reads).
    A load's global plan step is DCP's default, which leaves every rank's plan as it is: each rank runs it
    on its own plan (a planner whose global step joined plans across ranks would see one).
    `keys`: every key this rank's planner will look up in the metadata; given, the coordinator alone reads
    it and sends each rank its part (a planner that looks up any other key finds it missing)."""
    _, rank = _where(group)
    coordinator = rank == 0
    plan, error = None, None
    metadata: Metadata | None = None
    if keys is not None:
        metadata, error = _metadata_of(reader, keys, group)
        if error is not None:  # the coordinator's: the same on every rank, named once
            raise RankFailure({0: error}, f"{what}: metadata")
    try:
        metadata = metadata or reader.read_metadata()
        planner.set_up_planner(state_dict, metadata, coordinator)
        reader.set_up_storage_reader(metadata, coordinator, rank=rank, use_collectives=True)
        plan = reader.prepare_local_plan(planner.create_local_plan())
        plan = reader.prepare_global_plan(planner.create_global_plan([plan]))[0]
    except Exception as e:
        error = _said(e)
    failed = gather_failures(error, group)
    if failed:
        raise RankFailure(failed, f"{what}: plan")
    try:
        reads = reader.read_data(planner.finish_plan(cast(LoadPlan, plan)), planner)
        reads.wait()
    except Exception as e:
        error = _said(e)
    failed = gather_failures(error, group)
    if failed:
        raise RankFailure(failed, f"{what}: read")
