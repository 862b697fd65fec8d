"""What every summarise.py here shares: reading a run.sh output directory's JSON lines and
printing the table of medians (min–max) per column per system.

Each harness's summarise.py imports it (python3 stdlib only) by putting this directory on
sys.path, and keeps what is its own: which lines are figures, which rows and columns there
are, and the settings printed above the table.
"""

import json
import re
import statistics
import sys
from pathlib import Path

# Every column a harness's table may have, with its label; each harness lists its own.
LABELS = {
    "enqueue_1_per_call": "enqueue 1/call",
    "batch_of_100": "batch of 100",
    "process_w1": "process W=1",
    "process_wn": "process W=N",
    "end_to_end_w1": "end to end W=1",
    "end_to_end_wn": "end to end W=N",
}


def directory_argument():
    """The one argument, DIR; a usage error (exit status 1) otherwise."""
    if len(sys.argv) != 2:
        sys.exit("usage: summarise.py DIR")
    return Path(sys.argv[1])


def lines(directory):
    """Every JSON value in DIR/r<ROUND>-<SYSTEM>.jsonl, file by file in name order.

    Exits with an `error:` line when there is no such file or a line is not JSON.
    """
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
            yield value


def add(systems, name, version, column, figure):
    """Adds one round's `figure` to `systems`: {system: {"version": str, "cells": {column: [jobs/s]}}}."""
    system = systems.setdefault(name, {"version": version, "cells": {}})
    system["cells"].setdefault(column, []).append(figure)


def cell(values):
    """One column's figures as "median (min–max)", "n/a" where there are none."""
    if not values:
        return "n/a"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:,.0f} (1 round)"
    return f"{median:,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def ranking(fixed, others):
    """A sort key: the names in `fixed` in that order, any other name at rank `others`, by name."""
    return lambda name: (fixed.index(name) if name in fixed else others, name)


def print_table(systems, columns, order):
    """The table, after a blank line: one row per system in `order`, one column per key in `columns`."""
    print()
    print("jobs/s, median (min–max) over the rounds")
    print()
    print("| system | version | " + " | ".join(LABELS[column] for column in columns) + " | rounds |")
    print("|---|---|" + "---:|" * len(columns) + "---:|")
    for name in sorted(systems, key=order):
        system = systems[name]
        rounds = max(len(v) for v in system["cells"].values())
        cells = [cell(system["cells"].get(column, [])) for column in columns]
        print(f"| {name} | {system['version']} | " + " | ".join(cells) + f" | {rounds} |")
