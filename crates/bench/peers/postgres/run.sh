#!/usr/bin/env bash
# fenceq beside graphile-worker and pg-boss on one PostgreSQL server, in one run: the peers
# (peers.js) and fenceq (fenceq-bench) alternate, round after round, and the table of
# medians per column per system comes at the end (summarise.py).
#
#   crates/bench/peers/postgres/run.sh [OPTIONS] URL
#
#   --rounds N       rounds (default 3); each round runs every peer, then fenceq
#   --jobs N         jobs per case (default 20000; fenceq-bench needs at least 1000)
#   --workers N      W of the process W=N and end to end W=N columns (default 4)
#   --peers LIST     comma-separated, of graphile,pgboss (default both)
#   --out DIR        where the raw JSON lines go (default a new directory under /tmp)
#   --timeout-secs S the longest one step (one peer's six cases, or fenceq's) may take
#                    (default 3600; peers.js also bounds each case at 600 s)
#
# Needs: `npm ci` run once in this directory (node_modules/ is not committed), and
# target/release/fenceq-bench built with
#   cargo build --release -p fenceq-bench --features postgres
# (or FENCEQ_BENCH=/path/to/fenceq-bench).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../../../.." && pwd -P)
bench="${FENCEQ_BENCH:-$repo/target/release/fenceq-bench}"

rounds=3
jobs=20000
workers=4
peers=graphile,pgboss
out=
timeout_secs=3600
url=

die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) rounds="${2:?}"; shift 2 ;;
        --jobs) jobs="${2:?}"; shift 2 ;;
        --workers) workers="${2:?}"; shift 2 ;;
        --peers) peers="${2:?}"; shift 2 ;;
        --out) out="${2:?}"; shift 2 ;;
        --timeout-secs) timeout_secs="${2:?}"; shift 2 ;;
        -h|--help) usage ;;
        -*) printf 'run.sh: unknown option %s\n' "$1" >&2; usage ;;
        *) [[ -z "$url" ]] || die "one URL only"; url="$1"; shift ;;
    esac
done
[[ -n "$url" ]] || url="${FENCEQ_POSTGRES_URL:-}"
[[ -n "$url" ]] || { printf 'run.sh: the server URL is required (or FENCEQ_POSTGRES_URL)\n' >&2; usage; }
for n in "$rounds" "$jobs" "$workers" "$timeout_secs"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "$n: a positive integer expected"
done

[[ -d "$here/node_modules/graphile-worker" && -d "$here/node_modules/pg-boss" ]] \
    || die "no node_modules in $here: run 'npm ci' there first"
[[ -x "$bench" ]] \
    || die "no $bench: build it with 'cargo build --release -p fenceq-bench --features postgres' (or set FENCEQ_BENCH)"
command -v node >/dev/null || die "node is not on PATH"
command -v python3 >/dev/null || die "python3 is not on PATH"

if [[ -z "$out" ]]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/fenceq-peers.XXXXXX")
fi
mkdir -p "$out"
# Scratch schema prefixes unique to this run, so that two runs on one server never meet.
tag="peers_$$"

say() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
load() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"; }

# The server's durability settings, printed with the run (the figures mean little without them).
node "$here/peers.js" --url "$url" --settings | tee "$out/server.txt" \
    || die "cannot read the server's settings"
say "rounds=$rounds jobs=$jobs workers=$workers peers=$peers; raw lines in $out"

for round in $(seq 1 "$rounds"); do
    IFS=, read -r -a peer_list <<<"$peers"
    for peer in "${peer_list[@]}"; do
        say "round $round: $peer"
        load
        timeout --kill-after=30 "$timeout_secs" node "$here/peers.js" --url "$url" --jobs "$jobs" \
            --workers "$workers" --only "$peer" --schema "${tag}_r${round}" >"$out/r${round}-${peer}.jsonl" \
            || die "round $round: peers.js --only $peer failed (exit $?); partial lines in $out"
    done
    say "round $round: fenceq"
    load
    timeout --kill-after=30 "$timeout_secs" "$bench" --db "$url" --only intake,pool,end_to_end --jobs "$jobs" \
        --workers "$workers" --json --rounds 1 --schema "fenceq_${tag}_r${round}" >"$out/r${round}-fenceq.jsonl" \
        || die "round $round: fenceq-bench failed (exit $?); partial lines in $out"
    load
done

say "done"
printf '\nload average (1, 5, 15 min) at each step:\n'
cat "$out/load.txt"
printf '\n'
python3 "$here/summarise.py" "$out"
printf '\nW=N is W=%s.\n' "$workers"
