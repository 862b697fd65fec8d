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
# repo, bench, the shared options' defaults and the steps (../common/README.md).
source "$here/../common/steps.sh"

# --help prints lines 2 to 18 of the header above (it has always stopped before the last one).
usage_end=18
peers=graphile,pgboss
url=

# The one argument besides the shared options: the server's URL.
own_option() {
    case "$1" in
        -*) printf 'run.sh: unknown option %s\n' "$1" >&2; usage ;;
        *) [[ -z "$url" ]] || die "one URL only"; url="$1"; used=1 ;;
    esac
}

parse_options "$@"
[[ -n "$url" ]] || url="${FENCEQ_POSTGRES_URL:-}"
[[ -n "$url" ]] || { printf 'run.sh: the server URL is required (or FENCEQ_POSTGRES_URL)\n' >&2; usage; }
positive_integers "$rounds" "$jobs" "$workers" "$timeout_secs"

needs 'cargo build --release -p fenceq-bench --features postgres' graphile-worker pg-boss

make_out fenceq-peers
# Scratch schema prefixes unique to this run, so that two runs on one server never meet.
tag="peers_$$"

# The server's durability settings, printed with the run (the figures mean little without them).
node "$here/peers.js" --url "$url" --settings | tee "$out/server.txt" \
    || die "cannot read the server's settings"
say "rounds=$rounds jobs=$jobs workers=$workers peers=$peers; raw lines in $out"

# load.txt has one unlabelled line before each step and one after fenceq's.
peer_step() {
    local round="$1" peer="$2"
    load
    step "$round" "$peer" "peers.js --only $peer" node "$here/peers.js" --url "$url" --jobs "$jobs" \
        --workers "$workers" --only "$peer" --schema "${tag}_r${round}"
}
fenceq_step() {
    local round="$1"
    load
    step "$round" fenceq fenceq-bench "$bench" --db "$url" --only intake,pool,end_to_end --jobs "$jobs" \
        --workers "$workers" --json --rounds 1 --schema "fenceq_${tag}_r${round}"
    load
}

run_rounds
report
