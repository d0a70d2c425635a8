"""Examples judged ahead of Hypothesis asking for them, a few at a time in worker processes.

Hypothesis draws the next example only once the test returns, so a fuzzing run is one case after the
other. But with the same seed and settings it draws the same examples in the same order as long as they
pass (an example's outcome steers nothing else): a first pass of the same test that only records what it
is given (no case runs; milliseconds each; in a forked child while this process loads the backends) lists
the examples of the real pass. Those are judged in workers (launch.workers), in that order, while the
real pass asks for them one by one and takes each result as it is ready. What the real pass asks for
beyond the list (an example after a rejected one, the shrinking after a failure) runs here as before, so
verdicts, shrinking and replays are those of a run without workers; only the waiting is shorter."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pickle
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..checkers import UNKNOWN, Verdict
from ..errors import ConfigError
from ..launch.lifetime import die_with_parent
from ..runner.adapters import BackendRef, resolve_backend
from ..runner.run import CaseResult, replay_command, run_case
from ..runner.scenario import Scenario
from ..stopping import held
from ..vocab.combos import Combination

DRAW_SECONDS = 30.0  # at most this long drawing ahead; examples past it run one by one
DRAW_MAX = 2000  # and at most this many examples
CHILD_GRACE_SECONDS = 10.0  # a drawing child's time to send its list once DRAW_SECONDS are up


@dataclass
class Rejected:
    """A generated corruption found nothing to damage: not an example (Hypothesis is told to reject it)."""

    case_dir: str
    why: str


def judged(
    scenario: Scenario, combo: Combination, case_dir: str, io: str | None, backends: dict[str, BackendRef]
) -> CaseResult | Rejected:
    """One example's result: run_case, a runner that broke as an UNKNOWN case, or Rejected. `backends`: the
    run's backends resolved so far, by name (each resolved once, in this process)."""
    try:
        # the scenario's backend: opts.backend, with drawn options under --backend-options
        if scenario.backend not in backends:
            backends[scenario.backend] = resolve_backend(scenario.backend)
        return run_case(scenario, combo, case_dir, backend=backends[scenario.backend], io=io)
    except Exception as e:
        if isinstance(e, ConfigError) or _while_damaging(e):
            return Rejected(case_dir, f"{type(e).__name__}: {e}")
        # the runner itself broke: never a pass, kept and shrunk like any failure
        return _runner_failed(scenario, combo, case_dir, scenario.backend, e)


class _Drawn(BaseException):
    """Ends the drawing pass early (not an Exception: Hypothesis lets it through, nothing to shrink)."""


def draw_ahead(as_test: Callable[[Callable], Callable], meanwhile: Callable[[], object] | None = None) -> list:
    """The examples the real pass will be given, in order: `as_test(fn)` is `fn` decorated as the real
    pass's test is (strategy, seed, settings), without its example database (what the database replays
    first is not drawn: it runs when asked for). With `meanwhile` (loading the backends the workers will
    inherit: both take about a second), a forked child draws while this process runs it; a child that
    fails to send its list back is replaced by drawing here."""
    if meanwhile is None:
        return _draw(as_test)
    ctx = mp.get_context("fork")
    mine, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_draw_into, args=(as_test, theirs, os.getpid()), name="fuzz-draw")
    with held():  # a Ctrl-C landing in the after-fork hooks would be lost there
        child.start()
    theirs.close()
    drawn = None
    try:
        meanwhile()
        if mine.poll(DRAW_SECONDS + CHILD_GRACE_SECONDS):
            drawn = mine.recv()
    except (EOFError, OSError, pickle.UnpicklingError):
        drawn = None  # the child died or sent something unreadable
    finally:
        mine.close()
        child.join(CHILD_GRACE_SECONDS if drawn is not None else 0)
        if child.is_alive():
            child.kill()
            child.join()
    return drawn if isinstance(drawn, list) else _draw(as_test)


def _draw(as_test: Callable[[Callable], Callable]) -> list:
    drawn: list = []
    start = time.monotonic()

    def record(example) -> None:
        drawn.append(example)
        if len(drawn) >= DRAW_MAX or time.monotonic() - start > DRAW_SECONDS:
            raise _Drawn()

    try:
        as_test(record)()
    except _Drawn:
        pass
    return drawn


def _draw_into(as_test: Callable[[Callable], Callable], conn, parent: int) -> None:
    status = 1
    try:
        die_with_parent(parent)
        gc.freeze()  # the parent's heap, inherited: collections need not walk (nor copy) it
        conn.send(_draw(as_test))
        status = 0
    except BaseException:  # noqa: BLE001  the parent draws itself; nothing of the child's must escape
        pass
    finally:
        os._exit(status)  # never the parent's atexit handlers


class RunAhead:
    """The drawn examples judged in workers, in order; `take(key)` waits for one (None: not drawn, or its
    worker failed: the caller judges it itself)."""

    def __init__(self, drawn: list[tuple[Scenario, Combination]], workers: int, work: str, io: str | None):
        from ..launch.workers import run_each
        from ..runner.adapters import preload
        from ..runner.learn import sharing_layouts

        preload((s.backend, c) for s, c in drawn)  # imported once here, not once in every worker
        self.items = [(s, c, os.path.join(work, f"ahead-{i:05d}"), io) for i, (s, c) in enumerate(drawn)]
        # a key -> its indices, in order: two draws can build the same example, and each is asked for
        self.where: dict[str, list[int]] = {}
        for i, (s, c) in enumerate(drawn):
            self.where.setdefault(key_of(s, c), []).append(i)
        self.done: dict[int, object] = {}
        self.taken: set[int] = set()
        self.hits = self.misses = 0
        self._sharing = sharing_layouts(under=work)
        self._sharing.__enter__()
        self._results = run_each(_judge_item, self.items, workers)

    def take(self, key: str) -> CaseResult | Rejected | None:
        indices = self.where.get(key)
        if not indices:
            self.misses += 1
            return None
        i = indices.pop(0)
        while i not in self.done:
            j, out = next(self._results)
            self.done[j] = out
        out = self.done.pop(i)
        self.taken.add(i)
        if not isinstance(out, (CaseResult, Rejected)):  # the worker died or could not send it back
            shutil.rmtree(self.items[i][2], ignore_errors=True)
            self.misses += 1
            return None
        self.hits += 1
        return out

    def counts(self) -> dict:
        return {"drawn": len(self.items), "taken": self.hits, "judged_here": self.misses}

    def close(self) -> None:
        """Workers stopped; the folders of examples judged ahead and never asked for removed."""
        self._results.close()
        self._sharing.__exit__(None, None, None)
        for i in set(range(len(self.items))) - self.taken:  # a taken one's folder is the run's now
            shutil.rmtree(self.items[i][2], ignore_errors=True)


def key_of(scenario: Scenario, combo: Combination) -> str:
    return f"{combo}\n{scenario.to_yaml()}"


_WORKER_BACKENDS: dict[str, BackendRef] = {}  # a worker's own, for the one run it lives for


def _judge_item(item) -> CaseResult | Rejected:
    scenario, combo, case_dir, io = item
    return judged(scenario, combo, case_dir, io, _WORKER_BACKENDS)


def _while_damaging(e: BaseException) -> bool:
    """Whether the exception came out of corruption at rest (resilience/faults/corruption.py)."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace(os.sep, "/").endswith("resilience/faults/corruption.py"):
            return True
        tb = tb.tb_next
    return False


def _runner_failed(scenario: Scenario, combo: Combination, case_dir: str, backend: str, e: Exception) -> CaseResult:
    import traceback

    from ..report.matrix_table import FRAMEWORK, FRAMEWORK_ERROR

    detail = f"the runner raised {type(e).__name__}: {e}"
    os.makedirs(case_dir, exist_ok=True)
    with open(os.path.join(case_dir, FRAMEWORK_ERROR), "w", encoding="utf-8") as f:
        f.write(traceback.format_exc())
    return CaseResult(
        scenario.name,
        str(combo),
        UNKNOWN,
        [Verdict(FRAMEWORK, UNKNOWN, detail, [{"traceback": traceback.format_exc()}])],
        0.0,
        case_dir,
        replay_command(os.path.join(case_dir, "scenario.yaml"), combo, backend),
        detail,
    )
