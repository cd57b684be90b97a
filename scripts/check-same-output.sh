#!/bin/bash
# Two builds of ptlab must agree byte for byte on everything the model
# reports: for every scenario in tests/scenarios/, scenarios/examples/ and
# scenarios/seeds/, on both architectures,
#   ptlab run --format json --check-invariants   (observations, expectations)
#   ptlab cost --format json                     (hardware events, kernel calls)
# and, per directory, `ptlab coverage --format json --before both` (rule
# hits). Seeds and examples run at small parameters (size 1T → 8G, 1G and
# 256M → 8M, 16M → 4M, 1M kept; iterations → 3); examples' costs also at
# their default parameters; seeds with and without the `--before` switch
# their header names. A change meant to make the model faster (docs/model.md, issue 14)
# must leave all of it unchanged.
#
#   cargo build --release -p ptlab && cp target/release/ptlab /tmp/ptlab-old   # before the change
#   ... change, build ...
#   scripts/check-same-output.sh /tmp/ptlab-old target/release/ptlab
#   FULL=1 scripts/check-same-output.sh OLD NEW   # seeds also at default parameters (cost only; minutes)
#
# Prints one line per difference and a summary; exit status 0 when the two
# agree everywhere, 1 otherwise, 2 on bad arguments. Outputs are kept in
# $OUT (default: a fresh temporary directory) as OUT/{a,b}/<case>.
set -u
cd "$(dirname "$0")/.."
if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
    echo "usage: scripts/check-same-output.sh OLD_PTLAB NEW_PTLAB (both executables)" >&2
    exit 2
fi
A=$1
B=$2
OUT=${OUT:-$(mktemp -d /tmp/check-same-output.XXXXXX)}
mkdir -p "$OUT/a" "$OUT/b"
cases=0
diffs=0

# one NAME ARGS...: run ARGS with both binaries, compare stdout + exit status.
one() {
    local name=$1
    shift
    "$A" "$@" >"$OUT/a/$name" 2>&1
    echo "exit $?" >>"$OUT/a/$name"
    "$B" "$@" >"$OUT/b/$name" 2>&1
    echo "exit $?" >>"$OUT/b/$name"
    cases=$((cases + 1))
    if ! cmp -s "$OUT/a/$name" "$OUT/b/$name"; then
        diffs=$((diffs + 1))
        echo "DIFFER: $name: ptlab $*"
    fi
}

# The small parameters for a seed or example file (declared params only).
small_params() {
    local f=$1
    grep -q "^param size = 1T" "$f" && printf -- "--param size=8G "
    grep -Eq "^param size = (1G|256M)" "$f" && printf -- "--param size=8M "
    grep -q "^param size = 16M" "$f" && printf -- "--param size=4M "
    grep -q "^param iterations" "$f" && printf -- "--param iterations=3 "
}

for f in tests/scenarios/*.ptl scenarios/examples/*.ptl scenarios/seeds/*.ptl; do
    base=$(basename "$f" .ptl)
    dir=$(basename "$(dirname "$f")")
    params=""
    befores=("")
    [ "$dir" = scenarios ] || params=$(small_params "$f")
    if [ "$dir" = seeds ]; then
        sw=$(grep -o -- "--before [a-z-]*" "$f" | head -1 | cut -d' ' -f2)
        [ -n "$sw" ] && befores+=("$sw")
    fi
    for arch in x86_64 arm64; do
        for bf in "${befores[@]}"; do
            extra=()
            tag=""
            if [ -n "$bf" ]; then
                extra=(--before "$bf")
                tag=".before-$bf"
            fi
            # shellcheck disable=SC2086
            one "$dir.$base.$arch$tag.run" run --format json --check-invariants --arch "$arch" $params "${extra[@]}" "$f"
            # shellcheck disable=SC2086
            one "$dir.$base.$arch$tag.cost" cost --format json --arch "$arch" $params "${extra[@]}" "$f"
            if [ "$dir" = examples ] || { [ "${FULL:-0}" = 1 ] && [ "$dir" = seeds ]; }; then
                one "$dir.$base.$arch$tag.cost-default" cost --format json --arch "$arch" "${extra[@]}" "$f"
            fi
        done
    done
done
for d in tests/scenarios scenarios/examples; do
    for arch in x86_64 arm64; do
        one "coverage.$(basename "$d").$arch" coverage --format json --before both --arch "$arch" "$d"
    done
done
echo "check-same-output: $cases cases, $diffs differ (outputs in $OUT)"
[ "$diffs" -eq 0 ]
