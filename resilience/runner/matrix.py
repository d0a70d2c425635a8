"""The seed's table, measured: combinations x faults x transitions as generated scenarios."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import ConfigError, ResilienceError
from ..state import ModelSpec, Transition
from ..vocab.combos import Combination
from .corners import EACH_FILE, corner_scenario, each_file_scenarios
from .fault_steps import FAULT_STEPS, fault_of
from .scenario_model import Scenario, Step

if TYPE_CHECKING:
    from .adapters import BackendName

# The adversarial state model (ramp-up, skipped iterations, wide values) with a vocabulary padded to an
# odd 105 rows at tp1 (110 at tp2): dp 2 and dp 3 split the distributed optimizer's rows unevenly
# (105 and hidden 32 over 2 and 3 ranks).
MODEL = ModelSpec(
    num_layers=4,
    hidden=32,
    ffn_hidden=64,
    heads=4,
    vocab=101,
    make_vocab_size_divisible_by=5,
    optimizer="distributed",
    rampup_samples=16,
    skip_every=3,
    value_range="wide",
)
ADAM = replace(MODEL, optimizer="adam")
# a mixture of experts: every layer's MLP a router and 4 experts, in 2 layers (one per stage at pp 2)
MOE = replace(MODEL, num_experts=4, num_layers=2)
BASE = "tp2pp1dp1"

# fault column -> the steps that exercise it; every case ends with a resume on the same topology, and the
# columns whose fault strikes a save in process first recover in the same job (a kill leaves nothing to). Paths
# starting with @ name a role in the backend's learned layout (faults.layout): "@data" is a data file of
# the next save after the fault is armed, "@data#2" of the second one.
_TWO_SAVES: list[dict] = [{"train": 2}, {"save": None}, {"train": 1}]
FAULTS: dict[str, list[dict]] = {
    "save/load": _TWO_SAVES + [{"save": None}],
    # rank 1 straggles, then dies mid-write of a data file of the second save (the first save's async
    # writer is done)
    "kill": _TWO_SAVES
    + [
        {"finalize": None},
        {"fault": {"kind": "slow_write", "rank": 1, "delay": 0.2, "times": 2, "path": "@data"}},
        {"crash": {"rank": 1, "after_bytes": 256, "file": "@data"}},
        {"save": None},
        {"recover": None},
    ],
    # rank 1's first write to a data file of the second save fails (disk full): that save must not count,
    # and the same ranks then save and load again (recover)
    "io_error": _TWO_SAVES
    + [
        {"finalize": None},
        {"fault": {"kind": "io_error", "rank": 1, "errno": "ENOSPC", "op": "write", "path": "@data"}},
        {"save": None},
        {"recover": None},
    ],
    # rank 1's background writer process is SIGKILLed from outside as it writes a data file of the second
    # save; the rank lives on: finalize must fail on every rank, nothing of that save may be committed, and
    # the same job then saves and loads again (recover). Async saves only (N/A on sync ones), and N/A where
    # the writer is a thread of the rank (the reference): nothing to kill alone
    "writer_kill": _TWO_SAVES
    + [
        {"finalize": None},
        {"fault": {"kind": "writer_kill", "rank": 1, "path": "@data"}},
        {"save": None},
        {"recover": None},
    ],
    # damage in the newest checkpoint: tensor payload of a data file, one of the backend's metadata files
    "truncate": _TWO_SAVES + [{"save": None}, {"corrupt": {"kind": "truncate"}}],
    "bitflip": _TWO_SAVES + [{"save": None}, {"corrupt": {"kind": "bitflip"}}],
    # a data file of the newest checkpoint gone: a loader must fall back or refuse, never fill it in
    "delete": _TWO_SAVES + [{"save": None}, {"corrupt": {"kind": "delete"}}],
    "metadata": _TWO_SAVES + [{"save": None}, {"corrupt": {"kind": "metadata"}}],
    # a pickle a load reads (DCP's .metadata, else a torch.save file's data.pkl) made to run a command first
    # (manifest updated to match): never run it
    "pickle": _TWO_SAVES + [{"save": None}, {"corrupt": {"kind": "hostile_pickle"}}],
    # the newest iteration saved again: the re-save stamps another generation, so a load tells which it read
    "resave": _TWO_SAVES + [{"save": None}, {"save": None}],
    # every file operation of both saves recorded; power lost while rank 1 writes a data file of the second.
    # Judged under the POSIX minimum, the contract every backend is held to (fsync the folder after a
    # rename): ext4's journal would hide a missing folder fsync
    "lost_unsynced": [
        {"train": 2},
        {
            "lose_unsynced": {
                "rank": 1,
                "after_bytes": 200,
                "file": "@data#2",
                "max_states": 8,
                "persistence": "posix_minimum",
            }
        },
        {"save": None},
        {"train": 1},
        {"finalize": None},
        {"save": None},
    ],
}


def _both_tries(record: dict) -> list[dict]:
    """A request failed on both tries of the client (botocore retries a failed request once)."""
    return [{"fault": record}, {"fault": {**record, "nth": 2}}]


# The columns of an object store's requests, carried out by the fault proxy before its server: run by
# `--storage s3` beside every other column. rank 1's upload of a data file of the second save is answered
# 503 SlowDown, or cut mid-body, on both tries: that save must not count and the same ranks save again
# (recover); the same upload held 1.5 s (a slow store: an async save's finalize must wait for it); its
# answer lost once: the object is there, the client saw an error; and the newest iteration
# saved again with its coordinator killed at the second object copied into place: the iteration must still
# load whole (the copy set aside before, or the new one), never be lost; and the copy of the commit marker
# done on the store with its answer lost on both tries: the save must not say it failed if it took effect.
_UPLOAD = {"rank": 1, "path": "@data", "op": "put"}
_MARKER = {"rank": 0, "path": "*/iter_0000003/manifest.json", "op": "copy"}  # the reference's commit marker
# the columns aimed at the reference's commit by copies (its marker, the copy a re-save sets aside): run by
# default for backends that write through the seam; another backend's are N/A by default, run when named
REFERENCE_STORE_COLUMNS = ("s3-lost-marker", "s3-resave-kill")
STORE_FAULTS: dict[str, list[dict]] = {
    "s3-503": _TWO_SAVES
    + [{"finalize": None}, *_both_tries({"kind": "http_error", "status": 503, **_UPLOAD}), {"save": None}]
    + [{"recover": None}],
    "s3-reset": _TWO_SAVES
    + [{"finalize": None}, *_both_tries({"kind": "connection_reset", **_UPLOAD}), {"save": None}]
    + [{"recover": None}],
    "s3-slow": _TWO_SAVES
    + [{"finalize": None}, {"fault": {"kind": "slow_write", "delay": 1.5, **_UPLOAD}}, {"save": None}]
    + [{"finalize": None}],
    "s3-lost-answer": _TWO_SAVES
    + [{"finalize": None}, {"fault": {"kind": "response_lost", **_UPLOAD}}, {"save": None}, {"recover": None}],
    "s3-lost-marker": _TWO_SAVES
    + [{"finalize": None}, *_both_tries({"kind": "response_lost", **_MARKER}), {"save": None}, {"recover": None}],
    "s3-resave-kill": _TWO_SAVES
    + [{"save": None}, {"fault": {"kind": "rank_crash", "rank": 0, "op": "copy", "nth": 2, "path": "*/iter_0000003/*"}}]
    + [{"save": None}],
}
TRANSITIONS: dict[str, str] = {
    "tp": "tp2pp1dp1->tp1pp1dp1",
    "pp": "tp1pp2dp1->tp1pp1dp1",
    "dp": "tp1pp1dp2->tp1pp1dp3",
    "tp+pp+dp": "tp2pp2dp1->tp1pp2dp2",
    # context parallel (dense state replicated over dp x cp, the distributed optimizer sharded there) and
    # interleaved pipeline chunks switched off and on
    "cp": "tp1pp1dp2cp2->tp1pp1dp2",
    "vpp": "tp1pp2dp1vpp2->tp1pp2dp1",
    "vpp-on": "tp1pp2dp1->tp1pp2dp1vpp2",
    # experts (on the MoE model): expert parallel and expert tensor parallel changed; tp, dp and ep at once
    # (experts regrouped over 4 ranks, their optimizer rows over another expert-data-parallel group); and a dp
    # change with tp 2 > ep x etp 1 (a legacy file per (tp, pp, ep) written by expert-data-parallel rank 0
    # misses tp rank 1)
    "ep": "tp1pp1dp2ep2->tp1pp1dp2",
    "etp": "tp2pp1dp1etp2->tp2pp1dp1",
    "moe": "tp2pp2dp2ep2->tp1pp2dp4ep4",
    "moe-dp": "tp2pp1dp2->tp2pp1dp1",
    # a resume in another precision: the distributed optimizer's fp32 main parameters split unevenly over dp 2
    "to-bf16": "tp1pp1dp2:fp32->tp1pp1dp2:bf16",
    "to-fp32": "tp1pp1dp2:bf16->tp1pp1dp2:fp32",
    # the optimizer moments' dtype alone: fp32 moments rounded into bf16 ones (a loss every load must own up
    # to), and bf16 moments upcast
    "optim-to-bf16": "tp1pp1dp2:fp32->tp1pp1dp2:fp32+optim_bf16",
    "optim-to-fp32": "tp1pp1dp2:fp32+optim_bf16->tp1pp1dp2:fp32",
}
# Both optimizers: the columns listed here run with plain Adam, the others with the distributed optimizer
# (the LEGACY layout writes its distrib_optim.pt even on dp 1, so both kinds of file meet every fault).
ADAM_COLUMNS = ("io_error", "bitflip", "lost_unsynced", "pp", "tp+pp+dp")
MOE_COLUMNS = ("ep", "etp", "moe", "moe-dp")


def model_of(column: str) -> ModelSpec:
    if column in MOE_COLUMNS:
        return MOE
    return ADAM if column in ADAM_COLUMNS else MODEL


@dataclass
class Case:
    scenario: Scenario
    combo: Combination
    column: str
    fault: str | None
    transition: str | None


def _steps(raw: list[dict], seed: int | None = None, metadata_file: str = "") -> list[Step]:
    """Steps as the YAML loader makes them, fault steps read into their records. A corruption takes `seed`
    unless it names its own (--seed moves the damage too, not only the state) and damages `metadata_file`
    when one is given."""
    out = []
    for d in raw:
        ((kind, args),) = d.items()
        args = {"steps": args} if kind == "train" else dict(args or {})
        if kind == "corrupt" and seed is not None:
            args.setdefault("seed", seed)
            if metadata_file:
                args["name"] = metadata_file
        out.append(Step(kind, args, fault=fault_of(kind, args) if kind in FAULT_STEPS else None))
    return out


def fault_scenario(name: str, seed: int) -> Scenario:
    column, _, file_name = name.partition(":")
    columns = {**FAULTS, **STORE_FAULTS}
    if column not in columns or (file_name and column != "metadata"):
        raise ConfigError(
            "--faults",
            f"unknown fault column {name!r}",
            f"use {', '.join(columns)} (or metadata:FILE for one metadata file; the s3-* ones with --storage s3)",
        )
    steps = _steps(columns[column] + [{"resume": {"continue": 2}}], seed, file_name)
    return Scenario(f"matrix-{name}", steps, model_of(name), _topo(BASE), seed=seed, tags=["matrix"])


def transition_scenario(label: str, text: str, seed: int) -> Scenario:
    t = Transition.parse(text)
    base = model_of(label)
    if any(side.ep * side.etp > 1 for side in (t.save, t.load)):
        base = MOE  # an explicit transition that splits experts runs on the model that has them
    model = base.in_precision(t.save_precision) if t.save_precision else base
    model.check_topology(t.save)
    model.check_topology(t.load)
    resume: dict = {"topology": str(t.load), "continue": 2}
    if t.precision_changed:
        resume["precision"] = str(t.load_precision)
    steps = _steps([{"train": 2}, {"save": None}, {"train": 1}, {"save": None}, {"resume": resume}])
    return Scenario(f"matrix-{label}", steps, model, t.save, seed=seed, tags=["matrix"])


def metadata_files_read(combo: Combination, backend: BackendName, folder: str) -> list[str] | None:
    """The names of the metadata files a load of `combo` reads, from the backend's learned layout on the
    matrix's base topology (cached: the cases reuse it); None when it cannot be learned."""
    layout = _base_layout(combo, backend, folder)
    if layout is None:
        return None  # the metadata case of this combination will show why
    return sorted({os.path.basename(f.template) for f in layout.of("metadata") if f.read is not False}) or None


def data_files_written(combo: Combination, backend: BackendName, folder: str) -> list[str] | None:
    """The templates of the data files a save of `combo` writes on the matrix's base topology (the learned
    layout, cached); None when it cannot be learned."""
    layout = _base_layout(combo, backend, folder)
    return sorted(f.template for f in layout.of("data")) or None if layout is not None else None


def _base_layout(combo: Combination, backend: BackendName, folder: str):
    from .learn import learn_layout

    try:
        return learn_layout(MODEL, _topo(BASE), combo, backend, folder)
    except ResilienceError:
        return None


def _topo(text):
    from ..state import Topology

    return Topology.parse(text)


def cases(
    combos: list[Combination],
    faults: list[str],
    transitions: dict[str, str],
    seed: int,
    metadata_files: Callable[[Combination], list[str] | None] | None = None,
    corners: Sequence[str] = (),
    data_files: Callable[[Combination], list[str] | None] | None = None,
) -> list[Case]:
    """Every case of the matrix. `metadata_files(combo)`: the metadata files a load of that combination
    reads (None: unknown); the `metadata` column then damages each of them in a case of its own
    (`metadata:FILE`), since a check of one file says nothing about the others. `corners`: the corners
    table's columns (runner.corners), one case each per combination; `data_files(combo)`: the data-file
    templates of that combination's learned layout, which the damage-each-file corner damages in turn."""
    out = []
    for combo in combos:
        for f in faults:
            files = metadata_files(combo) if f == "metadata" and metadata_files is not None else None
            for column in [f"metadata:{n}" for n in files] if files else [f]:
                out.append(Case(fault_scenario(column, seed), combo, column, column, None))
        for label, text in transitions.items():
            out.append(Case(transition_scenario(label, text, seed), combo, label, None, str(Transition.parse(text))))
        for name in corners:
            if name == EACH_FILE:
                files = data_files(combo) if data_files is not None else None
                out += [Case(sc, combo, column, None, None) for column, sc in each_file_scenarios(files, seed)]
            else:
                out.append(Case(corner_scenario(name, seed), combo, name, None, None))
    return out


def parse_transitions(items: list[str] | None) -> dict[str, str]:
    """Names from TRANSITIONS or explicit 'tp2pp1dp1->tp1pp1dp2' (with precisions, 'tp1pp1dp1:fp32->tp1pp1dp1:bf16',
    'tp1pp1dp1:fp32->tp1pp1dp1:fp32+optim_bf16');
    'none' for no transition column."""
    if not items:
        return dict(TRANSITIONS)
    out = {}
    for item in items:
        if item == "none":
            continue
        if item in TRANSITIONS:
            out[item] = TRANSITIONS[item]
        else:
            t = Transition.parse(item)
            out[str(t)] = str(t)
    return out
