#!/usr/bin/env python3
"""Print the predicted before/after of every seed workload on every built-in
profile as a Markdown table (docs/cost.md). Usage:

    cargo build --release -p ptlab
    python3 scripts/seed-cost-table.py [path/to/ptlab] > table.md

Each seed scenario runs with its default parameters (the SEEDS.md sizes).
"""
import json
import subprocess
import sys

PTLAB = sys.argv[1] if len(sys.argv) > 1 else "target/release/ptlab"

# (scenario, switch, operations that make up the timed part)
SEEDS = [
    ("mremap-batch-4k", "mremap-pte-batch", ["mremap"]),
    ("mremap-batch-64k", "mremap-pte-batch", ["mremap"]),
    ("mremap-table-aligned", "mremap-table-move", ["mremap"]),
    ("mremap-table-unaligned", "mremap-table-move", ["mremap"]),
    ("fork-4k", "fork-pte-batch", ["fork", "exit"]),
    ("fork-thp-pte", "fork-pte-batch", ["fork", "exit"]),
    ("mprotect-thp-pte", "mprotect-pte-batch", ["mprotect"]),
    ("mprotect-64k", "mprotect-pte-batch", ["mprotect"]),
    ("mprotect-4k", "mprotect-pte-batch", ["mprotect"]),
    ("uffd-copy", "uffd-move-batch", ["uffd copy", "madvise"]),
    ("uffd-move", "uffd-move-batch", ["uffd move"]),
]


def fmt(ns):
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def pct(b, a):
    return "=" if b == a else (f"{(a - b) / b * 100:+.1f} %" if b else "new")


def ops_ns(pred, ops):
    return sum(o["ns"] for o in pred["by_op"] if o["op"] in ops)


def main():
    print("| workload | switch | profile | timed ops | before | after | change | whole run before | after | change |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name, switch, ops in SEEDS:
        out = subprocess.run(
            [PTLAB, "cost", f"scenarios/seeds/{name}.ptl", "--compare-before", switch, "--format", "json"],
            check=True, capture_output=True, text=True).stdout
        doc = json.loads(out)
        for p in doc["profiles"]:
            b, a = p["before"], p["after"]
            tb, ta = ops_ns(b, ops), ops_ns(a, ops)
            print(f"| {name} | {switch} | {p['profile']} | {' + '.join(ops)} | {fmt(tb)} | {fmt(ta)} | {pct(tb, ta)} "
                  f"| {fmt(b['ns'])} | {fmt(a['ns'])} | {pct(b['ns'], a['ns'])} |")


if __name__ == "__main__":
    main()
