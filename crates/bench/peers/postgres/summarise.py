#!/usr/bin/env python3
"""Medians per column per system of a run.sh output directory, as a Markdown table.

    python3 summarise.py DIR

Reads DIR/r<ROUND>-<SYSTEM>.jsonl: peers.js lines ({"peer", "version", "column",
"jobs_per_s"}) and fenceq-bench --json lines (per-round cells, `scenario`
"postgres/<row>/<column>", `value` in jobs/s; its summary lines are skipped, as each file
holds one round). Each cell is "median (min-max)" over the rounds that measured it, "n/a"
where the system has no such figure.
"""

import json
import re
import statistics
import sys
from pathlib import Path

COLUMNS = [
    ("enqueue_1_per_call", "enqueue 1/call"),
    ("batch_of_100", "batch of 100"),
    ("process_w1", "process W=1"),
    ("process_wn", "process W=N"),
    ("end_to_end_w1", "end to end W=1"),
    ("end_to_end_wn", "end to end W=N"),
]

# fenceq-bench's rows, in the order they are shown; the raw SQL loops are reference rows.
FENCEQ_ROWS = {
    "fenceq": "fenceq",
    "raw_sql/1_op_per_tx": "raw SQL, 1 op/tx (reference)",
    "raw_sql/100_ops_per_tx": "raw SQL, 100 ops/tx (reference)",
}


def read(directory):
    """{system: {"version": str, "cells": {column: [jobs/s per round]}}} and the settings seen."""
    systems = {}
    settings = set()
    files = sorted(directory.glob("r*-*.jsonl"))
    if not files:
        sys.exit(f"error: no r<ROUND>-<SYSTEM>.jsonl files in {directory}")
    for path in files:
        match = re.fullmatch(r"r(\d+)-.*\.jsonl", path.name)
        if not match:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"error: {path}:{number}: not JSON: {e}")
            if "peer" in value:
                name, version, column, figure = value["peer"], value["version"], value["column"], value["jobs_per_s"]
            elif "scenario" in value and "summary" not in value:
                parts = value["scenario"].split("/")
                if parts[0] != "postgres":
                    continue
                row, column = "/".join(parts[1:-1]), parts[-1]
                if row not in FENCEQ_ROWS:
                    continue
                name, version, figure = FENCEQ_ROWS[row], "this checkout", value["value"]
            else:
                continue
            settings.add(
                (value.get("server_version"), value.get("fsync"), value.get("synchronous_commit"), value.get("jobs"))
            )
            system = systems.setdefault(name, {"version": version, "cells": {}})
            system["cells"].setdefault(column, []).append(figure)
    return systems, settings


def cell(values):
    if not values:
        return "n/a"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:,.0f} (1 round)"
    return f"{median:,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def order(name):
    fixed = ["fenceq", "graphile-worker", "pg-boss"]
    return (fixed.index(name) if name in fixed else len(fixed), name)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarise.py DIR")
    systems, settings = read(Path(sys.argv[1]))
    for server_version, fsync, synchronous_commit, jobs in sorted(settings, key=str):
        print(
            f"server {server_version}, fsync={fsync}, synchronous_commit={synchronous_commit}, {jobs} jobs per case"
        )
    print()
    print("jobs/s, median (min–max) over the rounds")
    print()
    print("| system | version | " + " | ".join(label for _, label in COLUMNS) + " | rounds |")
    print("|---|---|" + "---:|" * len(COLUMNS) + "---:|")
    for name in sorted(systems, key=order):
        system = systems[name]
        rounds = max(len(v) for v in system["cells"].values())
        cells = [cell(system["cells"].get(column, [])) for column, _ in COLUMNS]
        print(f"| {name} | {system['version']} | " + " | ".join(cells) + f" | {rounds} |")


if __name__ == "__main__":
    main()
