// Live check of the munmap flushes of freed page tables (ptlab issue 15,
// thirteenth session): each case maps at A = 64 TiB (a 512 GiB region of
// its own), sets up, writes a marker into the ftrace instance's
// trace_marker, munmaps, writes an end marker. The tlb:tlb_flush events
// between the markers are the munmap's flushes.
#include "live-tlb-trace.h"

static void unmap(const char *name, char *p, size_t len) {
    char b[128];
    snprintf(b, sizeof b, "BEGIN %s", name);
    mark(b);
    if (munmap(p, len)) { perror("munmap"); exit(1); }
    snprintf(b, sizeof b, "END %s", name);
    mark(b);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: flush TRACE_MARKER\n"); return 2; }
    marker = open(argv[1], O_WRONLY);
    if (marker < 0) { perror(argv[1]); return 1; }
    for (int round = 0; round < 3; round++) {
        char *p = map(2 * M, 0);
        unmap("2m-untouched", p, 2 * M);

        p = map(2 * M, 0);
        memset(p, 1, 2 * M);
        unmap("2m-4k", p, 2 * M);

        p = map(1 * G, 0);
        for (size_t i = 0; i < 512; i++) p[i * 2 * M] = 1;
        unmap("1g-4k-sparse", p, 1 * G);

        p = map(1 * G, 0);
        if (madvise(p, 1 * G, MADV_HUGEPAGE)) { perror("madvise"); return 1; }
        memset(p, 1, 1 * G);
        unmap("1g-thp", p, 1 * G);

        p = map(64 * G, MAP_NORESERVE);
        p[0] = 1;
        unmap("64g-page-at-start", p, 64 * G);

        p = map(64 * G, MAP_NORESERVE);
        p[32 * G] = 1;
        unmap("64g-page-inside", p, 64 * G);

        for (int n = 507; n <= 508; n++) {
            p = map(n * 2 * M, 0);
            for (int i = 0; i < n; i++) p[i * 2 * M] = 1;
            char name[32];
            snprintf(name, sizeof name, "%d-pte-tables", n);
            unmap(name, p, n * 2 * M);
        }
        for (int n = 34; n <= 35; n++) {
            p = map(n * 2 * M, 0);
            for (int i = 0; i < n; i++) {
                p[i * 2 * M] = 1;
                if (madvise(p + i * 2 * M, 4 * K, MADV_DONTNEED)) { perror("dontneed"); return 1; }
            }
            char name[32];
            snprintf(name, sizeof name, "%d-empty-tables", n);
            unmap(name, p, n * 2 * M);
        }
    }
    return 0;
}
