#!/usr/bin/env python3
"""Medians per column per system of a run.sh output directory, as a Markdown table.

    python3 summarise.py DIR

Reads DIR/r<ROUND>-<SYSTEM>.jsonl: peers.js lines ({"peer", "version", "column",
"jobs_per_s"}) and fenceq-bench --json lines (per-round figures, `scenario` such as
"fenceq/intake/enqueue_1_per_call" or "raw_sqlite/process/1_per_tx", `value` in jobs/s; its
summary lines are skipped, as each file holds one round). Each cell is "median (min-max)"
over the rounds that measured it, "n/a" where the system has no such figure.
"""

import sys
from pathlib import Path

# The shared reading and table (../common/summary.py); no bytecode written there, so that a
# summary leaves nothing behind in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
import summary  # noqa: E402

# The table's columns, as peers.js names them (their labels are in summary.LABELS).
COLUMNS = ["enqueue_1_per_call", "batch_of_100", "process_w1", "process_wn", "end_to_end_wn"]

# fenceq-bench's SQLite scenarios by the table's row: {scenario name: column}; `{w}` is the
# line's `workers`. The raw rusqlite loops are reference rows, placed as docs/performance.md
# places them. fenceq's end to end with 4 producers has no peer figure and is left out.
FENCEQ_ROWS = {
    "fenceq": {
        "fenceq/intake/enqueue_1_per_call": "enqueue_1_per_call",
        "fenceq/intake/enqueue_batch_100": "batch_of_100",
        "fenceq/process/1_worker": "process_w1",
        "fenceq/process/{w}_workers": "process_wn",
        "fenceq/end_to_end/1_producer_{w}_workers": "end_to_end_wn",
    },
    "fenceq, jobs without an intake key (as plainjob's)": {
        "fenceq/intake/enqueue_1_per_call_without_key": "enqueue_1_per_call",
    },
    "raw SQLite, autocommit INSERT (reference)": {"raw_sqlite/intake/autocommit": "enqueue_1_per_call"},
    "raw SQLite, autocommit INSERT without AUTOINCREMENT (reference)": {
        "raw_sqlite/intake/autocommit_plain_ids": "enqueue_1_per_call",
    },
    "raw SQLite, 1 op/tx (reference)": {
        "raw_sqlite/intake/1_per_tx": "enqueue_1_per_call",
        "raw_sqlite/process/1_per_tx": "process_w1",
        "raw_sqlite/end_to_end/1_per_tx": "end_to_end_wn",
    },
    "raw SQLite, 100 ops/tx (reference)": {
        "raw_sqlite/intake/100_per_tx": "batch_of_100",
        "raw_sqlite/process/100_per_tx": "process_wn",
        "raw_sqlite/end_to_end/100_per_tx": "end_to_end_wn",
    },
}


def fenceq_cell(value):
    """(row, column) of a fenceq-bench line, or None for a scenario the table leaves out."""
    scenario = value["scenario"]
    workers = value.get("workers")
    for row, scenarios in FENCEQ_ROWS.items():
        for pattern, column in scenarios.items():
            if scenario == pattern.replace("{w}", str(workers)):
                return row, column
    return None


def read(directory):
    """{system: {"version": str, "cells": {column: [jobs/s per round]}}} and the settings seen."""
    systems = {}
    settings = set()
    for value in summary.lines(directory):
        if "summary" in value:
            # fenceq-bench's summaries (over its one round) and its ratios: this table makes
            # its own.
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
        summary.add(systems, name, version, column, figure)
    return systems, settings


# The order of the rows and of the settings lines above the table (fenceq-bench's settings
# after fenceq's row; any other system, between fenceq-bench and plainjob, by name).
ORDER = [
    "fenceq",
    "fenceq-bench",
    "plainjob",
    "raw SQLite, autocommit INSERT (reference)",
    "raw SQLite, 1 op/tx (reference)",
    "raw SQLite, 100 ops/tx (reference)",
]


def main():
    systems, settings = read(summary.directory_argument())
    order = summary.ranking(ORDER, 1.5)
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
    summary.print_table(systems, COLUMNS, order)
    if any(name.startswith("raw SQLite") for name in systems):
        print()
        print(
            "The raw rows are fenceq-bench's rusqlite loops on one connection, one thread: their process "
            "figures claim every job, then settle every job (no workers), their end to end figures are "
            "the intake and that process one after the other."
        )


if __name__ == "__main__":
    main()
