#!/bin/sh
# Regenerate the example pictures of docs/show.md: docs/examples/*.html
# (ptlab show) and docs/examples/*.png (headless Chromium screenshots).
#
#   scripts/show-examples.sh [PATH-TO-PTLAB]
set -eu
cd "$(dirname "$0")/.."
PTLAB=${1:-target/release/ptlab}
if [ ! -x "$PTLAB" ]; then
    cargo build --release -p ptlab
fi
OUT=docs/examples

shot() { # NAME WIDTH HEIGHT
    if [ ! -x /usr/bin/chromium ]; then
        echo "show-examples: chromium not installed (scripts/setup.sh): no $OUT/$1.png"
        return
    fi
    profile=$(mktemp -d)
    /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" --hide-scrollbars --window-size="$2,$3" \
        --screenshot="$OUT/$1.png" "file://$PWD/$OUT/$1.html" >/dev/null 2>&1
    rm -rf "$profile"
    echo "show-examples: $OUT/$1.png"
}

show() { # NAME WIDTH HEIGHT ARGS...
    name=$1 w=$2 h=$3
    shift 3
    "$PTLAB" show "$@" -o "$OUT/$name.html"
    shot "$name" "$w" "$h"
}

# Teaching scenarios: every entry drawn.
show teach-mthp-fault 1320 620 --line 24 --before-after scenarios/examples/basic.ptl
show teach-cow-arm64 1320 1240 --arch arm64 --line 11 --before-after tests/scenarios/ff-s08-fork-mthp.ptl
show teach-pmd-split 1320 640 --line 9 --before-after tests/scenarios/ff-s20-partial-dontneed-pmd.ptl
show teach-fork-pmd-cow 1320 1240 --line 11 --before-after tests/scenarios/ff-s13-fork-pmd-thp.ptl
show teach-mprotect-batch 1320 1260 --arch arm64 --line 7 --before-after $OUT/teach-mprotect-batch.ptl
show teach-mprotect-per-pte 1320 1260 --arch arm64 --line 7 --before-after --before mprotect-pte-batch $OUT/teach-mprotect-batch.ptl

# The seed workloads at 1 GiB.
show seed-fork-1g-4k 1900 560 --line 13 --before-after $OUT/seed-fork-1g-4k.ptl
show seed-fork-1g-thp-pte-mapped 1900 560 --line 20 --before-after $OUT/seed-fork-1g-thp-pte-mapped.ptl
show seed-mprotect-1g-64k-arm64 1320 560 --arch arm64 --line 12 --before-after $OUT/seed-mprotect-1g-64k-arm64.ptl
show seed-mremap-1g-table-move 1320 520 --line 14 --before-after $OUT/seed-mremap-1g-table-move.ptl
show seed-mremap-64k-arm64 1320 900 --arch arm64 --line 6 --before-after $OUT/seed-mremap-64k-arm64.ptl
show seed-mremap-1g-unaligned 1320 900 --line 16 --before-after $OUT/seed-mremap-1g-table-move.ptl
