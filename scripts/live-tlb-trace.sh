#!/bin/bash
# Usage: scripts/live-tlb-trace.sh scripts/live-X-flushes.c
# The harness of the live TLB-flush checks (docs/cost.md, "The flush of
# freed page tables" and "TLB flushes the gather batches cause"): builds the
# given program (it includes scripts/live-tlb-trace.h), runs it pinned to
# CPU 1 (as root) with the tlb:tlb_flush tracepoint enabled in an ftrace
# instance of its own, and prints, per case and round, the `pages` field of
# each local flush (reason 3) between the program's BEGIN and END markers:
# (end - start) >> stride_shift of a range flush, -1 for a full flush
# (repeated values summarised as `value xCOUNT`). Needs gcc, tracefs and
# the tlb:tlb_flush event (x86). Touches no THP or swap knob; the instance
# is removed on every exit.
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 scripts/live-X-flushes.c" >&2; exit 2; }
T=/sys/kernel/tracing
[ -d "$T/events/tlb/tlb_flush" ] || { echo "no tlb:tlb_flush tracepoint under $T" >&2; exit 1; }
W=$(mktemp -d /tmp/tlb-trace.XXXXXX)
gcc -O2 -Wall -o "$W/flush" "$1"
I=$T/instances/ptlab-tlb-trace-$$
mkdir "$I"
trap 'echo 0 > "$I/events/tlb/tlb_flush/enable" 2>/dev/null; rmdir "$I" 2>/dev/null; rm -rf "$W"' EXIT
echo 1 > "$I/events/tlb/tlb_flush/enable"
echo 1 > "$I/tracing_on"
taskset -c 1 "$W/flush" "$I/trace_marker"
echo 0 > "$I/tracing_on"
python3 - "$I/trace" <<'PY'
import collections, re, sys
cur, acc, res = None, [], collections.OrderedDict()
for line in open(sys.argv[1]):
    m = re.search(r"tracing_mark_write: (BEGIN|END) (\S+)", line)
    if m:
        if m.group(1) == "BEGIN":
            cur, acc = m.group(2), []
        else:
            res.setdefault(cur, []).append(acc)
            cur = None
        continue
    if cur and "tlb_flush:" in line and line.strip().startswith("flush-"):
        f = re.search(r"pages:(-?\d+) reason:.*\((\d)\)", line)
        if f and f.group(2) == "3":
            acc.append(int(f.group(1)))
def short(r):
    out = []
    for v in r:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return "[" + ", ".join(f"{v}" if n == 1 else f"{v} x{n}" for v, n in out) + "]"
for case, rounds in res.items():
    print(f"{case:22} " + " ".join(short(r) for r in rounds))
PY
