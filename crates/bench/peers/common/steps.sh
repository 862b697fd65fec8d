# What every run.sh here shares, sourced by it (`source "$here/../common/steps.sh"`, with
# `here` its own directory): where fenceq-bench is, the options every harness takes and their
# checks, the steps of a round and the report at the end. Each run.sh keeps what is its own:
# its options (`own_option`), the settings it prints first, and what one peer's step and
# fenceq's step run (`peer_step`, `fenceq_step`).
#
# Variables a run.sh sets before calling these: `usage_end` (the last line of its header
# comment that `--help` prints) and `peers` (its default --peers).

repo=$(cd "$here/../../../.." && pwd -P)
bench="${FENCEQ_BENCH:-$repo/target/release/fenceq-bench}"

# The options every harness takes, at their defaults.
rounds=3
jobs=20000
workers=4
out=
timeout_secs=3600

die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n "2,${usage_end}p" "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# Parses the command line: the options above, `-h`/`--help`, and for anything else the
# run.sh's `own_option "$@"`, which takes its own options (setting `used` to how many
# arguments it took) and refuses the rest.
parse_options() {
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --rounds) rounds="${2:?}"; shift 2 ;;
            --jobs) jobs="${2:?}"; shift 2 ;;
            --workers) workers="${2:?}"; shift 2 ;;
            --peers) peers="${2:?}"; shift 2 ;;
            --out) out="${2:?}"; shift 2 ;;
            --timeout-secs) timeout_secs="${2:?}"; shift 2 ;;
            -h|--help) usage ;;
            *) own_option "$@"; shift "$used" ;;
        esac
    done
}

# Dies unless every argument is a positive integer.
positive_integers() {
    local n
    for n in "$@"; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "$n: a positive integer expected"
    done
}

# Dies unless what a run needs is there: the npm packages named (in $here/node_modules),
# fenceq-bench (built with BUILD, the cargo command the message gives), node and python3.
#   needs BUILD PACKAGE...
needs() {
    local build="$1" package
    shift
    for package in "$@"; do
        [[ -d "$here/node_modules/$package" ]] || die "no node_modules in $here: run 'npm ci' there first"
    done
    [[ -x "$bench" ]] || die "no $bench: build it with '$build' (or set FENCEQ_BENCH)"
    command -v node >/dev/null || die "node is not on PATH"
    command -v python3 >/dev/null || die "python3 is not on PATH"
}

# The --out directory, made: as given, or a new NAME.XXXXXX under $TMPDIR (/tmp).
make_out() {
    if [[ -z "$out" ]]; then
        out=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    fi
    mkdir -p "$out"
}

say() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# One line of $out/load.txt: the time, the load average (1, 5, 15 min) and LABEL when given.
#   load [LABEL...]
load() {
    local line
    line="$(date -u +%H:%M:%S) $(loadavg)"
    [[ $# -eq 0 ]] || line+="  $*"
    printf '%s\n' "$line" >>"$out/load.txt"
}

# One step of a round, bounded by --timeout-secs (then killed 30 s later), its stdout in
# $out/r<ROUND>-<SYSTEM>.jsonl; its failure ends the run (WHAT names it).
#   step ROUND SYSTEM WHAT COMMAND...
step() {
    local round="$1" system="$2" what="$3"
    shift 3
    timeout --kill-after=30 "$timeout_secs" "$@" >"$out/r${round}-${system}.jsonl" \
        || die "round $round: $what failed (exit $?); partial lines in $out"
}

# The rounds: in each, every peer of --peers (`peer_step ROUND PEER`), then fenceq
# (`fenceq_step ROUND`), so that a slow spell of the machine falls on every system alike.
run_rounds() {
    local round peer peer_list
    for round in $(seq 1 "$rounds"); do
        IFS=, read -r -a peer_list <<<"$peers"
        for peer in "${peer_list[@]}"; do
            say "round $round: $peer"
            peer_step "$round" "$peer"
        done
        say "round $round: fenceq"
        fenceq_step "$round"
    done
}

# The end of a run: the load at each step, the table of medians (summarise.py), what W=N was.
report() {
    say "done"
    printf '\nload average (1, 5, 15 min) at each step:\n'
    cat "$out/load.txt"
    printf '\n'
    python3 "$here/summarise.py" "$out"
    printf '\nW=N is W=%s.\n' "$workers"
}
