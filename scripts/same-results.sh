#!/bin/bash
# Byte-for-byte equality of two ptlab builds' results (issue 14: a speed
# change must change no observable result and no event count):
# `ptlab cost --format json` and `ptlab run --format json
# --check-invariants` of every scenario in tests/scenarios/,
# scenarios/examples/ and scenarios/seeds/ (seeds at small params, with and
# without the seed's --before switch), per architecture.
#
#   cp target/release/ptlab /tmp/ptlab-before     # the starting build
#   ... change, cargo build --release -p ptlab ...
#   scripts/same-results.sh /tmp/ptlab-before target/release/ptlab [ARCH ...]
#
# ARCH: x86_64 and/or arm64 (default both). Prints one line per
# difference and a summary; exit status 1 if anything differs.
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
    echo "usage: $0 BEFORE AFTER [ARCH ...]" >&2
    exit 2
fi
A=$1 B=$2
shift 2
ARCHES=${*:-x86_64 arm64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 bad=0
compare() { # ARGS... (after ptlab)
    n=$((n + 1))
    "$A" "$@" >"$tmp/a" 2>"$tmp/ae"
    ra=$?
    "$B" "$@" >"$tmp/b" 2>"$tmp/be"
    rb=$?
    if [ $ra -ne $rb ] || ! cmp -s "$tmp/a" "$tmp/b" || ! cmp -s "$tmp/ae" "$tmp/be"; then
        bad=$((bad + 1))
        echo "DIFFERS (exit $ra vs $rb): ptlab $*"
    fi
}
# The seed's --before switch, from its header comment.
seed_before() {
    grep -o -- '--before [a-z-]*' "$1" | head -1 | cut -d' ' -f2
}
for arch in $ARCHES; do
    for f in tests/scenarios/*.ptl scenarios/examples/*.ptl; do
        compare cost -q --format json --arch "$arch" "$f"
        compare run -q --format json --check-invariants --arch "$arch" "$f"
    done
    for f in scenarios/seeds/*.ptl; do
        small=()
        grep -q '^param size' "$f" && small+=(--param size=4M)
        grep -q '^param iterations' "$f" && small+=(--param iterations=3)
        sw=$(seed_before "$f")
        for before in "" ${sw:+--before=$sw}; do
            compare cost -q --format json --arch "$arch" "${small[@]}" $before "$f"
            compare run -q --format json --check-invariants --arch "$arch" "${small[@]}" $before "$f"
        done
    done
done
echo "same-results: $n comparisons, $bad differ"
[ $bad -eq 0 ]
