"""`resilience combos`: the seed's table of every (type, format, io) combination."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "combos",
        help="list every (type, format, io) combination: valid ones with the seed's "
        "status, invalid ones with the layer that forbids them and why",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of objects: type, format, io, valid, status (valid) or layer and reason (invalid)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..vocab.combos import table

    rows = table()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    valid = [r for r in rows if r["valid"]]
    invalid = [r for r in rows if not r["valid"]]
    print(
        f"{len(rows)} combinations of type x format x io: {len(valid)} valid, {len(invalid)} rejected "
        f"before any byte is written\n"
    )
    head = ("type", "format", "io", "valid")
    widths = [max(len(h), *(len(r[h] if isinstance(r[h], str) else "") for r in rows)) for h in head[:3]] + [5]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(f"{line}  status / why not")
    print("-" * (len(line) + 18))
    for r in valid + invalid:
        cells = [r["type"], r["format"], r["io"], "yes" if r["valid"] else "no"]
        what = r["status"] if r["valid"] else f"{r['layer']} layer: {r['reason']}"
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + what)
    return 0
