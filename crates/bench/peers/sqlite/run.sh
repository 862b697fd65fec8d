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
repo=$(cd "$here/../../../.." && pwd -P)
bench="${FENCEQ_BENCH:-$repo/target/release/fenceq-bench}"

rounds=3
jobs=20000
workers=4
peers=plainjob
out=
timeout_secs=3600
scratch_parent="${TMPDIR:-/tmp}"
poll_ms=50
producer=thread

die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) rounds="${2:?}"; shift 2 ;;
        --jobs) jobs="${2:?}"; shift 2 ;;
        --workers) workers="${2:?}"; shift 2 ;;
        --peers) peers="${2:?}"; shift 2 ;;
        --out) out="${2:?}"; shift 2 ;;
        --timeout-secs) timeout_secs="${2:?}"; shift 2 ;;
        --scratch) scratch_parent="${2:?}"; shift 2 ;;
        --poll-ms) poll_ms="${2:?}"; shift 2 ;;
        --producer) producer="${2:?}"; shift 2 ;;
        -h|--help) usage ;;
        *) printf 'run.sh: unknown argument %s\n' "$1" >&2; usage ;;
    esac
done
for n in "$rounds" "$jobs" "$workers" "$timeout_secs" "$poll_ms"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "$n: a positive integer expected"
done
[[ "$producer" == thread || "$producer" == inline ]] || die "--producer $producer: thread or inline"

[[ -d "$here/node_modules/plainjob" && -d "$here/node_modules/better-sqlite3" ]] \
    || die "no node_modules in $here: run 'npm ci' there first"
[[ -x "$bench" ]] \
    || die "no $bench: build it with 'cargo build --release -p fenceq-bench' (or set FENCEQ_BENCH)"
command -v node >/dev/null || die "node is not on PATH"
command -v python3 >/dev/null || die "python3 is not on PATH"
[[ -d "$scratch_parent" ]] || die "--scratch $scratch_parent: no such directory"

if [[ -z "$out" ]]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/fenceq-peers-sqlite.XXXXXX")
fi
mkdir -p "$out"
# The run's scratch directory: every database of both systems goes in it, and it goes at the
# end whatever happens (a step killed by `timeout` cannot clean up after itself).
scratch=$(mktemp -d "$scratch_parent/fenceq-peers-sqlite-scratch.XXXXXX")
trap 'rm -rf -- "$scratch"' EXIT

say() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
load() {
    local line
    line="$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)  $*"
    printf '%s\n' "$line" >>"$out/load.txt"
    say "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# SQLite's version and the pragmas plainjob leaves on its connection, printed with the run.
node "$here/peers.js" --settings --dir "$scratch" --poll-ms "$poll_ms" --producer "$producer" \
    | tee "$out/settings.txt" || die "cannot read plainjob's settings"
printf '%s\n' "$("$bench" --version)" | tee -a "$out/settings.txt"
say "rounds=$rounds jobs=$jobs workers=$workers peers=$peers; raw lines in $out"

for round in $(seq 1 "$rounds"); do
    IFS=, read -r -a peer_list <<<"$peers"
    for peer in "${peer_list[@]}"; do
        say "round $round: $peer"
        load "round $round: before $peer"
        timeout --kill-after=30 "$timeout_secs" node "$here/peers.js" --jobs "$jobs" --workers "$workers" \
            --only "$peer" --dir "$scratch" --poll-ms "$poll_ms" --producer "$producer" \
            >"$out/r${round}-${peer}.jsonl" \
            || die "round $round: peers.js --only $peer failed (exit $?); partial lines in $out"
    done
    say "round $round: fenceq"
    load "round $round: before fenceq"
    timeout --kill-after=30 "$timeout_secs" "$bench" --db "$scratch/fenceq-r${round}" \
        --only intake,pool,end_to_end --jobs "$jobs" --workers "$workers" --sync normal --json --rounds 1 \
        >"$out/r${round}-fenceq.jsonl" \
        || die "round $round: fenceq-bench failed (exit $?); partial lines in $out"
    rm -rf -- "$scratch/fenceq-r${round}"
    load "round $round: after fenceq"
done

say "done"
printf '\nload average (1, 5, 15 min) at each step:\n'
cat "$out/load.txt"
printf '\n'
python3 "$here/summarise.py" "$out"
printf '\nW=N is W=%s.\n' "$workers"
