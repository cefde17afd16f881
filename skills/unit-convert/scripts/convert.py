#!/usr/bin/env python3
"""Convert VALUE from one unit to another, with the factors in assets/units.json."""

import json
import sys
from decimal import Decimal, InvalidOperation

USAGE = "usage: convert.py VALUE FROM TO | --units | --explain UNIT"


def load() -> dict:
    # Relative to the skill's root, which is the working directory of every run.
    with open("assets/units.json", encoding="utf-8") as handle:
        return json.load(handle)


def find(units: dict, name: str) -> tuple:
    for dimension, table in units.items():
        if name in table:
            return dimension, Decimal(table[name])
    known = ", ".join(sorted(u for table in units.values() for u in table))
    sys.exit(f"convert.py: unknown unit {name!r}; known: {known}")


def explain(name: str) -> str:
    with open("references/units.md", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(f"- `{name}`"):
                return line[2:].strip()
    return f"{name}: no entry in references/units.md"


def main(argv: list) -> int:
    units = load()
    if argv == ["--units"]:
        for dimension, table in units.items():
            print(f"{dimension}: {' '.join(table)}")
        return 0
    if len(argv) == 2 and argv[0] == "--explain":
        print(explain(argv[1]))
        return 0
    if len(argv) != 3:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        value = Decimal(argv[0])
    except InvalidOperation:
        print(f"convert.py: {argv[0]!r} is not a number", file=sys.stderr)
        return 2
    (from_dim, from_factor), (to_dim, to_factor) = find(units, argv[1]), find(units, argv[2])
    if from_dim != to_dim:
        print(f"convert.py: {argv[1]} is a {from_dim}, {argv[2]} a {to_dim}", file=sys.stderr)
        return 2
    result = value * from_factor / to_factor
    print(f"{argv[0]} {argv[1]} = {float(result):.6g} {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
