"""One error hierarchy. Errors a user sees also inherit the stdlib type that fits."""

from __future__ import annotations


class ResilienceError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(ResilienceError, ValueError):
    """Bad input: a topology, a model spec, a scenario, a flag. Names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = ""):
        self.field = field
        self.problem = problem
        self.fix = fix
        msg = f"{field}: {problem}"
        if fix:
            msg += f" ({fix})"
        super().__init__(msg)

    def __reduce__(self):  # errors cross process boundaries (DCP pickles them): keep them picklable
        return type(self), (self.field, self.problem, self.fix)


class InvalidCombination(ConfigError):
    """A (type, format, io) combination that one layer forbids."""


class TopologyChangeRefused(ResilienceError, ValueError):
    """The checkpoint's semantics do not allow loading on this topology."""


class CheckpointNotFound(ResilienceError, FileNotFoundError):
    """No loadable checkpoint in a folder."""


class IntegrityError(ResilienceError, OSError):
    """A checkpoint file failed a check: names the file and the check."""

    def __init__(self, path: str, check: str, detail: str = ""):
        self.path = path
        self.check = check
        self.detail = detail
        msg = f"{path}: {check} failed"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)

    def __reduce__(self):
        return type(self), (self.path, self.check, self.detail)


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by SIGTERM (or SIGHUP): raised from the handler the `resilience` command
    installs, so that every `finally` runs (rank process groups torn down, the results so far written).
    Ctrl-C (SIGINT) stays Python's own KeyboardInterrupt; code that ends a run early catches both with
    `except KeyboardInterrupt` and tells them apart with isinstance(e, Interrupted).

    Not a ResilienceError on purpose: a stop request is not an error, and it must pass through every
    `except Exception` / `except ResilienceError` that turns a failure into a verdict (a checker that
    crashed is UNKNOWN; a layout that could not be learned is noted) and through Hypothesis, which takes any
    Exception from a test for a failing example to shrink, but stops on KeyboardInterrupt."""

    def __init__(self, signal_name: str = "SIGTERM"):
        self.signal_name = signal_name
        super().__init__(f"interrupted by {signal_name}")

    def __reduce__(self):
        return type(self), (self.signal_name,)


class SaveInProgress(ResilienceError, RuntimeError):
    """A new save was asked for while an async save is still in flight."""


class RankFailure(ResilienceError, RuntimeError):
    """One or more rank processes failed. `failures` maps rank -> what happened."""

    def __init__(self, failures: dict, what: str = "rank processes failed"):
        self.failures = dict(sorted(failures.items()))
        self.what = what
        lines = [f"{what}: failures={{{', '.join(str(r) for r in self.failures)}}}"]
        for rank, failure in self.failures.items():
            lines.append(f"--- rank {rank}: {failure}")
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return type(self), (self.failures, self.what)


class RankTimeout(RankFailure, TimeoutError):
    """A multi-process step did not finish in time; every rank was stopped."""


class AsyncSaveFailed(RankFailure):
    """A background write failed; raised at the next finalize, on every rank, with `failures`."""


class BrowserFailed(ResilienceError, RuntimeError):
    """The headless browser that renders a report crashed or did not finish in time."""
