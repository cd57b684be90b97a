// Live check of the TLB flushes the mmu_gather's page batches cause (ptlab
// issue 15, fifteenth session; docs/cost.md "TLB flushes the gather
// batches cause"): each case maps at A = 64 TiB (a 512 GiB region of its
// own), sets up, writes a marker into the ftrace instance's trace_marker,
// makes the call under test, writes an end marker. The tlb:tlb_flush
// events between the markers are the call's flushes. No THP knob is
// touched: the 4 KiB cases ask for small pages with MADV_NOHUGEPAGE.
#include "live-tlb-trace.h"

static void begin(const char *name) {
    char b[128];
    snprintf(b, sizeof b, "BEGIN %s", name);
    mark(b);
}

static void end(const char *name) {
    char b[128];
    snprintf(b, sizeof b, "END %s", name);
    mark(b);
}

static void check(int r, const char *what) {
    if (r) { perror(what); exit(1); }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: flush TRACE_MARKER\n"); return 2; }
    marker = open(argv[1], O_WRONLY);
    if (marker < 0) { perror(argv[1]); return 1; }
    for (int round = 0; round < 3; round++) {
        // A fully written GiB of 4 KiB pages, unmapped.
        char *p = map(1 * G, 0);
        memset(p, 1, 1 * G);
        begin("munmap-1g-4k");
        check(munmap(p, 1 * G), "munmap");
        end("munmap-1g-4k");

        // 9,688 pages: one page batch fills, 10 pages after it.
        p = map(9688 * 4 * K, 0);
        memset(p, 1, 9688 * 4 * K);
        begin("munmap-9688-pages");
        check(munmap(p, 9688 * 4 * K), "munmap");
        end("munmap-9688-pages");

        // MADV_DONTNEED of the written GiB (PT_RECLAIM frees its tables).
        p = map(1 * G, 0);
        memset(p, 1, 1 * G);
        begin("dontneed-1g-4k");
        check(madvise(p, 1 * G, MADV_DONTNEED), "dontneed");
        end("dontneed-1g-4k");
        check(munmap(p, 1 * G), "munmap");

        // MADV_DONTNEED of a GiB with one page per 2 MiB: 512 tables
        // reclaimed, the 509th fills the table batch.
        p = map(1 * G, 0);
        for (size_t i = 0; i < 512; i++) p[i * 2 * M] = 1;
        begin("dontneed-1g-sparse");
        check(madvise(p, 1 * G, MADV_DONTNEED), "dontneed");
        end("dontneed-1g-sparse");
        check(munmap(p, 1 * G), "munmap");

        // mprotect over three VMAs, the first and last changed.
        p = map(6 * M, 0);
        memset(p, 1, 6 * M);
        check(mprotect(p + 2 * M, 2 * M, PROT_READ), "mprotect");
        begin("mprotect-3-vmas");
        check(mprotect(p, 6 * M, PROT_READ), "mprotect");
        end("mprotect-3-vmas");
        check(munmap(p, 6 * M), "munmap");

        // The same with 8 KiB VMAs: one flush of 6 pages, or two of 2.
        p = map(6 * 4 * K, 0);
        memset(p, 1, 6 * 4 * K);
        check(mprotect(p + 8 * K, 8 * K, PROT_READ), "mprotect");
        begin("mprotect-3-small-vmas");
        check(mprotect(p, 6 * 4 * K, PROT_READ), "mprotect");
        end("mprotect-3-small-vmas");
        check(munmap(p, 6 * 4 * K), "munmap");
    }
    return 0;
}
