#!/usr/bin/env python3
"""Summarize a CSV file of the workspace, in the format of assets/report.txt."""

import csv
import os
import statistics
import sys


def numeric(values: list) -> list:
    """The values as numbers, when every non-empty one is (references/columns.md)."""
    out = []
    for value in values:
        if value.strip() == "":
            continue
        try:
            out.append(float(value))
        except ValueError:
            return []
    return out


def main(argv: list) -> int:
    if len(argv) != 1:
        print("usage: summarize.py PATH (relative to the workspace)", file=sys.stderr)
        return 2
    workspace = os.environ.get("STOCKADE_WORKSPACE", ".")
    path = os.path.join(workspace, argv[0])
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except OSError as error:
        print(f"summarize.py: cannot read {argv[0]}: {error.strerror}", file=sys.stderr)
        return 1
    if not rows:
        print(f"summarize.py: {argv[0]} has no header row", file=sys.stderr)
        return 1
    header, body = rows[0], rows[1:]
    with open("assets/report.txt", encoding="utf-8") as handle:
        template = handle.read()
    lines = []
    for index, name in enumerate(header):
        column = [row[index] if index < len(row) else "" for row in body]
        numbers = numeric(column)
        line = (
            f"- {name}: {sum(1 for v in column if v.strip())} values, {len(set(column))} distinct"
        )
        if numbers:
            mean = statistics.fmean(numbers)
            line += f", min {min(numbers):g}, max {max(numbers):g}, mean {mean:.4g}"
        lines.append(line)
    print(template.format(file=argv[0], rows=len(body), columns="\n".join(lines)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
