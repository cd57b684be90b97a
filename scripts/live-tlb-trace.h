// Shared by the live TLB-flush checks (scripts/live-*-flushes.c, run by
// scripts/live-tlb-trace.sh): each case maps at A = 64 TiB (a 512 GiB
// region of its own), writes BEGIN/END markers into the ftrace instance's
// trace_marker around the call under test; the tlb:tlb_flush events
// between them are that call's flushes.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define A ((char *)0x400000000000UL)
#define K 1024UL
#define M (1024 * K)
#define G (1024 * M)

static int marker;

static void mark(const char *s) {
    if (write(marker, s, strlen(s)) < 0) { perror("trace_marker"); exit(1); }
}

/* A private anonymous mapping of `len` at A, with extra mmap flags. */
static char *map(size_t len, int extra) {
    char *p = mmap(A, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | extra, -1, 0);
    if (p != A) { perror("mmap"); exit(1); }
    return p;
}
