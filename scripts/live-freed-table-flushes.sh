#!/bin/bash
# The munmap flushes of freed page tables on the running x86 kernel
# (docs/cost.md, "The flush of freed page tables (issue 15, thirteenth
# session)"): scripts/live-freed-table-flushes.c traced by
# scripts/live-tlb-trace.sh (root; the THP case asks for huge pages with
# MADV_HUGEPAGE, no knob is touched).
exec "$(dirname "$0")/live-tlb-trace.sh" "$(dirname "$0")/live-freed-table-flushes.c"
