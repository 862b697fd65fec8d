#!/usr/bin/env python3
"""Medians per column per system of a run.sh output directory, as a Markdown table.

    python3 summarise.py DIR

Reads DIR/r<ROUND>-<SYSTEM>.jsonl: peers.js lines ({"peer", "version", "column",
"jobs_per_s"}) and fenceq-bench --json lines (per-round cells, `scenario`
"postgres/<row>/<column>", `value` in jobs/s; its summary lines are skipped, as each file
holds one round). Each cell is "median (min-max)" over the rounds that measured it, "n/a"
where the system has no such figure.
"""

import sys
from pathlib import Path

# The shared reading and table (../common/summary.py); no bytecode written there, so that a
# summary leaves nothing behind in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
import summary  # noqa: E402

# The table's columns, in peers.js's names (their labels are in summary.LABELS).
COLUMNS = ["enqueue_1_per_call", "batch_of_100", "process_w1", "process_wn", "end_to_end_w1", "end_to_end_wn"]

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
    for value in summary.lines(directory):
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
        summary.add(systems, name, version, column, figure)
    return systems, settings


# The rows' order: fenceq, then the peers, then every other row (the raw SQL ones) by name.
ORDER = ["fenceq", "graphile-worker", "pg-boss"]


def main():
    systems, settings = read(summary.directory_argument())
    for server_version, fsync, synchronous_commit, jobs in sorted(settings, key=str):
        print(
            f"server {server_version}, fsync={fsync}, synchronous_commit={synchronous_commit}, {jobs} jobs per case"
        )
    summary.print_table(systems, COLUMNS, summary.ranking(ORDER, len(ORDER)))


if __name__ == "__main__":
    main()
