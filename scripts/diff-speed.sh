#!/bin/bash
# How fast `ptlab diff` is (docs/live.md, "How fast a diff is"): the full
# diff of scenarios/seeds/uffd-move.ptl and `--checkpoints-only` of every
# scenarios/seeds/*.ptl at default params, each run ROUNDS times (default
# 2) with every binary named, binaries interleaved so that they share the
# machine's load. As root (live runs).
#
#   scripts/diff-speed.sh [PTLAB ...]        # default: target/release/ptlab
#   ROUNDS=3 scripts/diff-speed.sh old/ptlab target/release/ptlab
#
# One line per run: binary, scenario, seconds per diff run (wall time minus
# the time spent waiting for the THP knob lock, divided by the number of
# runs: a diff whose counters moved differently runs twice more), the
# number of runs and the outcome; then each run's PTLAB_DIFF_TIMING line
# (per-comparison times). Report the better of the rounds: other live runs
# and builds on the machine slow any one of them.
set -u
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
if [ $# -eq 0 ]; then
    set -- target/release/ptlab
fi
for b in "$@"; do
    if [ ! -x "$b" ]; then
        echo "diff-speed: $b is not an executable (cargo build --release?)" >&2
        exit 2
    fi
done

one() { # BINARY ARGS...
    local bin=$1
    shift
    local s e out wait runs
    s=$(date +%s.%N)
    out=$(PTLAB_DIFF_TIMING=1 "$bin" diff -q "$@" 2>&1)
    e=$(date +%s.%N)
    wait=$(echo "$out" | grep -o "got the THP knob lock after [0-9.]* s" |
        awk '{ s += $7 } END { print s + 0 }')
    runs=$(echo "$out" | grep -c "timing:")
    [ "$runs" -gt 0 ] || runs=1
    printf "%s\t%s\t%.2f s per run\t%d run(s)\t%s\n" "$bin" "$*" \
        "$(echo "($e - $s - $wait) / $runs" | bc -l)" "$runs" \
        "$(echo "$out" | grep -E "^(AGREE|DIVERGE|PARTIAL)" | cut -d' ' -f1)"
    echo "$out" | grep "timing:" | sed 's/^/    /'
}

for round in $(seq "$ROUNDS"); do
    echo "# round $round"
    for b in "$@"; do
        one "$b" scenarios/seeds/uffd-move.ptl
    done
    for f in scenarios/seeds/*.ptl; do
        for b in "$@"; do
            one "$b" --checkpoints-only "$f"
        done
    done
done
