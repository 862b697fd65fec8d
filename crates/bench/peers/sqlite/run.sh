#!/usr/bin/env bash
# fenceq beside plainjob on SQLite, in one run: the peer (peers.js) and fenceq (fenceq-bench)
# alternate, round after round, and the table of medians per column per system comes at the
# end (summarise.py).
#
#   crates/bench/peers/sqlite/run.sh [OPTIONS]
#
#   --rounds N       rounds (default 3); each round runs every peer, then fenceq
#   --jobs N         jobs per case (default 20000; fenceq-bench needs at least 1000)
#   --workers N      W of the process W=N and end to end W=N columns (default 4)
#   --peers LIST     comma-separated, of plainjob (default plainjob)
#   --out DIR        where the raw JSON lines go (default a new directory under /tmp)
#   --timeout-secs S the longest one step (one peer's five cases, or fenceq's) may take
#                    (default 3600; peers.js also bounds each case at 600 s)
#   --scratch DIR    where the run's scratch directory (both systems' databases) is made
#                    (default $TMPDIR or /tmp); it is removed at the end, also on error
#   --poll-ms MS     plainjob's pollIntervall (default 50, fenceq-bench's pool's; plainjob's
#                    own default is 1000)
#   --producer MODE  plainjob's end to end producer: thread (default) or inline
#
# Needs: `npm ci` run once in this directory (node_modules/ is not committed), and
# target/release/fenceq-bench built with `cargo build --release -p fenceq-bench`
# (or FENCEQ_BENCH=/path/to/fenceq-bench).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd -P)
# repo, bench, the shared options' defaults and the steps (../common/README.md).
source "$here/../common/steps.sh"

# --help prints lines 2 to 23, the header above.
usage_end=23
peers=plainjob
scratch_parent="${TMPDIR:-/tmp}"
poll_ms=50
producer=thread

# The options besides the shared ones.
own_option() {
    case "$1" in
        --scratch) scratch_parent="${2:?}"; used=2 ;;
        --poll-ms) poll_ms="${2:?}"; used=2 ;;
        --producer) producer="${2:?}"; used=2 ;;
        *) printf 'run.sh: unknown argument %s\n' "$1" >&2; usage ;;
    esac
}

parse_options "$@"
positive_integers "$rounds" "$jobs" "$workers" "$timeout_secs" "$poll_ms"
[[ "$producer" == thread || "$producer" == inline ]] || die "--producer $producer: thread or inline"

needs 'cargo build --release -p fenceq-bench' plainjob better-sqlite3
[[ -d "$scratch_parent" ]] || die "--scratch $scratch_parent: no such directory"

make_out fenceq-peers-sqlite
# The run's scratch directory: every database of both systems goes in it, and it goes at the
# end whatever happens (a step killed by `timeout` cannot clean up after itself).
scratch=$(mktemp -d "$scratch_parent/fenceq-peers-sqlite-scratch.XXXXXX")
trap 'rm -rf -- "$scratch"' EXIT

# SQLite's version and the pragmas plainjob leaves on its connection, printed with the run.
node "$here/peers.js" --settings --dir "$scratch" --poll-ms "$poll_ms" --producer "$producer" \
    | tee "$out/settings.txt" || die "cannot read plainjob's settings"
printf '%s\n' "$("$bench" --version)" | tee -a "$out/settings.txt"
say "rounds=$rounds jobs=$jobs workers=$workers peers=$peers; raw lines in $out"

# load.txt has a labelled line before each step and one after fenceq's, each also said.
load_said() {
    load "$@"
    say "load average $(loadavg)"
}
peer_step() {
    local round="$1" peer="$2"
    load_said "round $round: before $peer"
    step "$round" "$peer" "peers.js --only $peer" node "$here/peers.js" --jobs "$jobs" --workers "$workers" \
        --only "$peer" --dir "$scratch" --poll-ms "$poll_ms" --producer "$producer"
}
fenceq_step() {
    local round="$1"
    load_said "round $round: before fenceq"
    step "$round" fenceq fenceq-bench "$bench" --db "$scratch/fenceq-r${round}" \
        --only intake,pool,end_to_end --jobs "$jobs" --workers "$workers" --sync normal --json --rounds 1
    rm -rf -- "$scratch/fenceq-r${round}"
    load_said "round $round: after fenceq"
}

run_rounds
report
