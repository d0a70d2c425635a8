"""`python -m benchmarks [name ...] [options]`: run every benchmark, or the named ones.

Options go to the benchmark when exactly one is named (`python -m benchmarks launcher --help`)."""

from __future__ import annotations

import importlib
import sys

# name -> module exposing `main(argv: list[str]) -> int`, which prints its figures
BENCHMARKS = {
    "launcher": "benchmarks.launcher",
    "checkpoint": "benchmarks.checkpoint",
    "scenario": "benchmarks.scenario",
    "fusefs": "benchmarks.fusefs",
    "io-matrix": "benchmarks.io_matrix",
    "job": "benchmarks.job",
    "s3-proxy": "benchmarks.s3proxy",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        print(f"\nbenchmarks: {', '.join(BENCHMARKS)}")
        return 0
    names = []
    while argv and not argv[0].startswith("-"):
        names.append(argv.pop(0))
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    if argv and len(names) != 1:
        print("options apply to one benchmark: python -m benchmarks NAME [options]", file=sys.stderr)
        return 2
    status = 0
    for i, name in enumerate(names or BENCHMARKS):
        if i:
            print()
        status |= importlib.import_module(BENCHMARKS[name]).main(argv)
    return status


if __name__ == "__main__":
    sys.exit(main())
