"""`resilience options BACKEND`: the options a backend's adapter declares, as a spec takes them."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "options",
        help="list the options a backend declares (name, allowed values, default, "
        "meaning, what cannot run here) and how a backend spec gives them",
    )
    p.add_argument("backend", help="'dcp', 'megatron' or package.module:factory (options in the spec are checked too)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list: name, default, allowed, io, meaning, refused {value: reason}",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..backends.options import describe, show
    from ..runner.adapters import resolve_backend
    from ..vocab.combos import valid_combinations

    backend = resolve_backend(args.backend)  # checks the spec's options
    declared = backend.declared_options
    backend.make((backend.combinations() or valid_combinations())[0])
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": o.name,
                        "default": o.default,
                        "allowed": o.allowed(),
                        "io": o.io or "any",
                        "meaning": o.meaning,
                        "refused": {show(v): why for v, why in o.refused.items()},
                    }
                    for o in declared
                ],
                indent=1,
            )
        )
        return 0
    base = backend.label
    if not declared:
        print(f"{base} declares no options")
        return 0
    print(
        f"{base}: {len(declared)} options (give them as {base}:name=value,name=value"
        f"{'' if ':' not in base else f' or {base}[name=value]'}; [async saves]: read by async saves only)"
    )
    for line in describe(declared):
        print("  " + line)
    return 0
