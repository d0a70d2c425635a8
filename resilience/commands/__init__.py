"""One module per `resilience` subcommand, each with `register(subparsers)` setting `func`."""

COMMANDS = [
    "demo",
    "combos",
    "adapter",
    "inspect",
    "run",
    "matrix",
    "fuzz",
    "validate",
    "corpus",
    "broken",
    "job",
    "report",
    "options",
]
