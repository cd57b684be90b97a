#!/usr/bin/env python3
"""Compare two check-same-output directories' cost outputs: every event and
kernel-call count by name, every execution count, line and op must agree;
prices (ns, ns_range, cycles, the whole-program figure) and the new events
(the NEW_EVENT names given) may differ. Run outputs, invariants and
coverage must be identical (byte for byte).

Usage: scripts/cmp-cost-counts.py OUT_DIR [NEW_EVENT ...]
OUT_DIR is a scripts/check-same-output.sh output directory (OUT=...), its
a/ and b/ the two binaries' outputs; each NEW_EVENT is an event the second
binary adds (e.g. pte_line_stream mprotect_large_batch).""" 
import json, os, sys
PRICE_KEYS = {"ns", "ns_range", "cycles", "program", "low", "high", "vs_before", "change"}
if len(sys.argv) < 2:
    sys.exit("usage: scripts/cmp-cost-counts.py OUT_DIR [NEW_EVENT ...]")
out = sys.argv[1]
NEW = set(sys.argv[2:])
a_dir, b_dir = os.path.join(out, "a"), os.path.join(out, "b")
def load(p):
    t = open(p).read()
    body, _, ex = t.rpartition("exit ")
    try:
        return json.loads(body), ex.strip()
    except Exception:
        return body, ex.strip()
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in PRICE_KEYS and k not in NEW}
    if isinstance(x, list):
        return [strip(v) for v in x if not (isinstance(v, dict) and v.get("event") in NEW)]
    return x
bad = same = cost_diff = 0
other_keys = set()
for name in sorted(os.listdir(a_dir)):
    pa, pb = os.path.join(a_dir, name), os.path.join(b_dir, name)
    if open(pa, "rb").read() == open(pb, "rb").read():
        same += 1
        continue
    if ".cost" not in name:
        print("NON-COST DIFFERS:", name); bad += 1; continue
    (ja, ea), (jb, eb) = load(pa), load(pb)
    if ea != eb or strip(ja) != strip(jb):
        print("COUNTS DIFFER:", name); bad += 1
    else:
        cost_diff += 1
print(f"{same} identical, {cost_diff} cost outputs differing only in prices and {sorted(NEW)}, {bad} other differences")
sys.exit(1 if bad else 0)
