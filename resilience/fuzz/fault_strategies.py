"""Hypothesis strategies for fault records (resilience.faults): single records valid for a world size,
and schedules of them. Shrinks toward fewer, plainer faults."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from ..faults import HTTP_OPS, KINDS, Fault, fault_from_dict
from ..state.topology import MAX_FUZZ_WORLD as MAX_WORLD
from ..vocab.phases import PHASES
from . import lifecycle as lc
from .strategy_args import check_int, check_names, fail


# ---- faults ----------------------------------------------------------------------------------------
def _rank_or_all(world: int, *, required: bool = False):
    ranks = st.integers(0, world - 1)
    return ranks if required else st.none() | ranks


def _fault_dicts(kind: str, world: int) -> st.SearchStrategy[dict]:
    """Records of one kind: what, where (rank, path, op), when (trigger), offset, seed."""
    seed = st.integers(0, 2**16)
    rank = _rank_or_all(world)
    one_rank = _rank_or_all(world)
    nth = st.integers(1, 4)
    if kind == "rank_crash":
        return _crash_dicts(kind, rank, nth, seed)
    if kind == "lost_unsynced_writes":
        return _power_loss_dicts(kind, rank, seed)
    if kind == "io_error":
        return _io_error_dicts(kind, rank, nth, seed)
    if kind in ("short_write", "torn_write"):
        return _partial_write_dicts(kind, rank, nth, seed)
    if kind == "slow_write":
        return _slow_write_dicts(kind, rank, nth, seed)
    if kind in ("rank_kill", "rank_hang"):
        return _timed_dicts(kind, rank, seed)
    if kind == "writer_kill":
        return _writer_kill_dicts(kind, rank, seed)
    if kind in HTTP_FIELDS:
        return _http_dicts(kind, rank, nth, seed)
    return _at_rest_dicts(kind, one_rank, seed)


def _crash_dicts(kind: str, rank, nth, seed) -> st.SearchStrategy[dict]:
    """A rank crash at a phase, a byte or an operation."""
    point = st.one_of(
        st.builds(lambda p: {"phase": p}, st.sampled_from(PHASES)),
        st.builds(
            lambda b, g: {"at_byte": b, **({"path": g} if g else {})},
            st.integers(0, 1 << 16),
            st.sampled_from([None, "*.pt", "*.distcp"]),
        ),
        st.builds(
            lambda o, w, n: {"op": o, "when": w, "nth": n},
            st.sampled_from(("create", "write", "fsync", "close", "rename", "mkdir")),
            st.sampled_from(("before", "after")),
            nth,
        ),
    )
    return st.builds(lambda r, p, s: {"kind": kind, "rank": r, **p, "seed": s}, rank, point, seed)


def _power_loss_dicts(kind: str, rank, seed) -> st.SearchStrategy[dict]:
    """A power loss, at a phase of a rank or at the job's end."""
    point = st.none() | st.builds(lambda p: {"phase": p}, st.sampled_from(PHASES))
    return st.builds(
        lambda r, p, m, t, s: {
            "kind": kind,
            **({"rank": r, **p} if p else {}),
            "max_states": m,
            "torn": t,
            "seed": s,
        },
        rank,
        point,
        st.integers(1, 8),
        st.booleans(),
        seed,
    )


def _io_error_dicts(kind: str, rank, nth, seed) -> st.SearchStrategy[dict]:
    """An error of the nth matching operation."""
    return st.builds(
        lambda r, o, n, e, s: {"kind": kind, "rank": r, "op": o, "nth": n, "errno": e, "seed": s},
        rank,
        st.sampled_from(("create", "write", "fsync", "close", "rename", "mkdir", "read")),
        nth,
        st.sampled_from(lc.ERRNOS + ("EDQUOT",)),
        seed,
    )


def _partial_write_dicts(kind: str, rank, nth, seed) -> st.SearchStrategy[dict]:
    """A short or torn write: what it keeps, and a torn one's fill."""
    extra = st.fixed_dictionaries({}, optional={"keep": st.integers(0, 4096)})
    if kind == "torn_write":
        extra = st.builds(lambda d, f: {**d, "fill": f}, extra, st.sampled_from(("zeros", "garbage")))
    return st.builds(lambda r, n, d, s: {"kind": kind, "rank": r, "nth": n, **d, "seed": s}, rank, nth, extra, seed)


def _slow_write_dicts(kind: str, rank, nth, seed) -> st.SearchStrategy[dict]:
    """A delay of the nth write, once or several times."""
    return st.builds(
        lambda r, n, d, t, s: {"kind": kind, "rank": r, "nth": n, "delay": d, "times": t, "seed": s},
        rank,
        nth,
        st.sampled_from((0.01, 0.05, 0.2)),
        st.none() | st.integers(1, 4),
        seed,
    )


# the kinds of an object store's requests (faults/http.py), each with its own fields
HTTP_FIELDS: dict[str, dict[str, st.SearchStrategy]] = {
    "http_error": {"status": st.sampled_from((503, 500))},
    "connection_reset": {"keep": st.none() | st.integers(0, 1 << 16)},
    "response_lost": {},
}


def _http_dicts(kind: str, rank, nth, seed) -> st.SearchStrategy[dict]:
    """A fault on the nth matching request to an object store (any request, or one operation, one key)."""
    where = st.fixed_dictionaries(
        {}, optional={"op": st.sampled_from(HTTP_OPS), "path": st.sampled_from(("*.pt", "*.distcp", "*"))}
    )
    return st.builds(
        lambda r, n, w, e, s: {"kind": kind, "rank": r, "nth": n, **w, **e, "seed": s},
        rank,
        nth,
        where,
        st.fixed_dictionaries(HTTP_FIELDS[kind]),
        seed,
    )


def _timed_dicts(kind: str, rank, seed) -> st.SearchStrategy[dict]:
    """A rank killed or hung after a time or a file size seen from outside."""
    when = st.one_of(
        st.builds(lambda a: {"after": a}, st.sampled_from((0.0, 0.1, 0.5, 1.0))),
        st.builds(
            lambda b, g: {"size": b, "path": g}, st.integers(0, 1 << 16), st.sampled_from(("*.pt", "*.distcp", "*"))
        ),
    )
    how: dict[str, st.SearchStrategy] = (
        {"signal": st.sampled_from(("SIGKILL", "SIGTERM"))}
        if kind == "rank_kill"
        else {"resume_after": st.none() | st.sampled_from((0.1, 0.5))}
    )
    return st.builds(
        lambda r, w, e, s: {"kind": kind, "rank": r, **w, **e, "seed": s},
        rank,
        when,
        st.fixed_dictionaries(how),
        seed,
    )


def _writer_kill_dicts(kind: str, rank, seed) -> st.SearchStrategy[dict]:
    """A background writer process killed, by a file, a size or a time."""
    return st.builds(
        lambda r, w, sc, s: {"kind": kind, "rank": r, **w, "scope": sc, "seed": s},
        rank,
        st.sampled_from(({}, {"path": "*.distcp"}, {"path": "*.distcp", "size": 1024}, {"after": 0.1})),
        st.sampled_from(("tree", "holder")),
        seed,
    )


def _at_rest_dicts(kind: str, one_rank, seed) -> st.SearchStrategy[dict]:
    """Damage at rest: each kind's own fields, an iteration for those aimed at one."""
    at_rest: dict[str, st.SearchStrategy] = {  # type: ignore[assignment]  # one row of the table
        "truncate": {"length": st.none() | st.integers(0, 64)},
        "bit_flip": {
            "bits": st.none() | st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True).map(tuple),
            "offset": st.none() | st.integers(0, 64),
        },
        "delete_file": {},
        "metadata_damage": {
            "name": st.sampled_from(("manifest.json", ".metadata", "metadata.json")),
            "how": st.sampled_from(lc.METADATA_HOW),
        },
        "tracker_damage": {"how": st.sampled_from(lc.TRACKER_HOW)},
        "leftover_staging": {},
        "extra_file": {"name": st.sampled_from(("unexpected.bin", "notes.txt")), "length": st.integers(0, 64)},
        "escaping_path": {"escape": st.sampled_from(("../outside.pt", "/etc/passwd"))},
        "hostile_pickle": {},
    }[kind]
    iteration = (
        {"iteration": st.integers(0, 8)}
        if kind
        in ("truncate", "bit_flip", "delete_file", "metadata_damage", "extra_file", "escaping_path", "hostile_pickle")
        else {}
    )

    def build(r, fields, opt, s):
        d = {"kind": kind, **({"rank": r} if r is not None else {}), **fields, **opt, "seed": s}
        if "offset" in d and d["offset"] is None:
            del d["offset"]
        if "bits" in d and d["bits"] is None:
            del d["bits"]
        if "length" in d and d["length"] is None:
            del d["length"]
        return d

    return st.builds(
        build, one_rank, st.fixed_dictionaries(at_rest), st.fixed_dictionaries({}, optional=iteration), seed
    )


def faults(*, world: int, kinds: Iterable[str] | None = None) -> st.SearchStrategy[Fault]:
    """Single fault records (resilience.faults) valid for `world` ranks: kind, target (rank, path, op,
    iteration, offset), trigger (nth, phase, at_byte, ...), seed. `kinds` restricts the kinds (names of
    resilience.faults.KINDS). Whether a record fires depends on what the run does; see scenarios()."""
    check_int("world", world, 1, MAX_WORLD)
    from ..faults import kinds as _defined  # noqa: F401  (registers every kind)

    names = check_names(kinds, "kinds", tuple(KINDS)) if kinds is not None else tuple(KINDS)
    return st.one_of([_fault_dicts(k, world) for k in names]).map(
        lambda d: fault_from_dict(d, world=world, where="fault")
    )


def fault_schedules(
    *, world: int, kinds: Iterable[str] | None = None, min_size: int = 0, max_size: int = 3
) -> st.SearchStrategy[list[Fault]]:
    """Lists of fault records for `world` ranks (see faults()); shrinks toward fewer, plainer faults."""
    check_int("min_size", min_size, 0)
    check_int("max_size", max_size, 0)
    if min_size > max_size:
        raise fail("min_size", f"{min_size} is larger than max_size={max_size}")
    return st.lists(faults(world=world, kinds=kinds), min_size=min_size, max_size=max_size)
