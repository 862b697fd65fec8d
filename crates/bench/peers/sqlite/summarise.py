#!/usr/bin/env python3
"""Medians per column per system of a run.sh output directory, as a Markdown table.

    python3 summarise.py DIR

Reads DIR/r<ROUND>-<SYSTEM>.jsonl: peers.js lines ({"peer", "version", "column",
"jobs_per_s"}) and fenceq-bench --json lines (per-round figures, `scenario` such as
"fenceq/intake/enqueue_1_per_call" or "raw_sqlite/process/1_per_tx", `value` in jobs/s; its
summary lines are skipped, as each file holds one round). Each cell is "median (min-max)"
over the rounds that measured it, "n/a" where the system has no such figure.
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
    ("end_to_end_wn", "end to end W=N"),
]

# fenceq-bench's SQLite scenarios: (row, column) by scenario name; `{w}` is the line's
# `workers`. The raw rusqlite loops are reference rows, placed as docs/performance.md places
# them. fenceq's end to end with 4 producers has no peer figure and is left out.
FENCEQ_SCENARIOS = {
    "fenceq/intake/enqueue_1_per_call": ("fenceq", "enqueue_1_per_call"),
    "fenceq/intake/enqueue_batch_100": ("fenceq", "batch_of_100"),
    "fenceq/process/1_worker": ("fenceq", "process_w1"),
    "fenceq/process/{w}_workers": ("fenceq", "process_wn"),
    "fenceq/end_to_end/1_producer_{w}_workers": ("fenceq", "end_to_end_wn"),
    "raw_sqlite/intake/autocommit": ("raw SQLite, autocommit INSERT (reference)", "enqueue_1_per_call"),
    "raw_sqlite/intake/1_per_tx": ("raw SQLite, 1 op/tx (reference)", "enqueue_1_per_call"),
    "raw_sqlite/process/1_per_tx": ("raw SQLite, 1 op/tx (reference)", "process_w1"),
    "raw_sqlite/end_to_end/1_per_tx": ("raw SQLite, 1 op/tx (reference)", "end_to_end_wn"),
    "raw_sqlite/intake/100_per_tx": ("raw SQLite, 100 ops/tx (reference)", "batch_of_100"),
    "raw_sqlite/process/100_per_tx": ("raw SQLite, 100 ops/tx (reference)", "process_wn"),
    "raw_sqlite/end_to_end/100_per_tx": ("raw SQLite, 100 ops/tx (reference)", "end_to_end_wn"),
}


def fenceq_cell(value):
    """(row, column) of a fenceq-bench line, or None for a scenario the table leaves out."""
    scenario = value["scenario"]
    workers = value.get("workers")
    for pattern, target in FENCEQ_SCENARIOS.items():
        if scenario == pattern.replace("{w}", str(workers)):
            return target
    return None


def read(directory):
    """{system: {"version": str, "cells": {column: [jobs/s per round]}}} and the settings seen."""
    systems = {}
    settings = set()
    files = sorted(directory.glob("r*-*.jsonl"))
    if not files:
        sys.exit(f"error: no r<ROUND>-<SYSTEM>.jsonl files in {directory}")
    for path in files:
        if not re.fullmatch(r"r(\d+)-.*\.jsonl", path.name):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"error: {path}:{number}: not JSON: {e}")
            if "summary" in value:
                # fenceq-bench's summaries (over its one round), its ratios and its stored peer
                # figures: this table makes its own.
                continue
            if "peer" in value:
                name, version, column, figure = value["peer"], value["version"], value["column"], value["jobs_per_s"]
                settings.add(
                    (
                        name,
                        f"SQLite {value.get('sqlite_version')} (better-sqlite3 {value.get('better_sqlite3')}, "
                        f"Node {value.get('node')}), journal_mode={value.get('journal_mode')}, "
                        f"synchronous={value.get('synchronous')}",
                        value.get("jobs"),
                    )
                )
                if value.get("poll_ms") is not None:
                    settings.add((name, f"pollIntervall {value['poll_ms']} ms", value.get("jobs")))
                if value.get("producer") is not None:
                    producer = {"thread": "a thread of its own", "inline": "the workers' thread"}.get(
                        value["producer"], value["producer"]
                    )
                    settings.add((name, f"end to end producer in {producer}", value.get("jobs")))
            elif "scenario" in value:
                target = fenceq_cell(value)
                if target is None or value.get("unit") != "jobs/s":
                    continue
                (name, column), version, figure = target, "this checkout", value["value"]
                settings.add(
                    ("fenceq-bench", f"synchronous={value.get('sync')} (WAL), W={value.get('workers')}", value.get("jobs"))
                )
            else:
                continue
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
    fixed = [
        "fenceq",
        "fenceq-bench",
        "plainjob",
        "raw SQLite, autocommit INSERT (reference)",
        "raw SQLite, 1 op/tx (reference)",
        "raw SQLite, 100 ops/tx (reference)",
    ]
    return (fixed.index(name) if name in fixed else 1.5, name)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarise.py DIR")
    systems, settings = read(Path(sys.argv[1]))
    by_system = {}
    for system, setting, jobs in settings:
        entry = by_system.setdefault(system, (set(), set()))
        entry[0].add(setting)
        entry[1].add(jobs)
    for system in sorted(by_system, key=order):
        seen, jobs = by_system[system]
        counts = ", ".join(str(j) for j in sorted(jobs, key=str))
        print(f"{system}: " + "; ".join(sorted(seen)) + f"; {counts} jobs per case")
    if len({jobs for _, _, jobs in settings}) > 1:
        print("warning: the systems ran different job counts")
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
    if any(name.startswith("raw SQLite") for name in systems):
        print()
        print(
            "The raw rows are fenceq-bench's rusqlite loops on one connection, one thread: their process "
            "figures claim every job, then settle every job (no workers), their end to end figures are "
            "the intake and that process one after the other."
        )


if __name__ == "__main__":
    main()
