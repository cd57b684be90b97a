#!/bin/bash
# The TLB flushes the mmu_gather's page batches cause, on the running x86
# kernel (docs/cost.md, "TLB flushes the gather batches cause (issue 15,
# fifteenth session)"): scripts/live-page-batch-flushes.c traced by
# scripts/live-tlb-trace.sh (root; MADV_NOHUGEPAGE, no knob is touched).
exec "$(dirname "$0")/live-tlb-trace.sh" "$(dirname "$0")/live-page-batch-flushes.c"
