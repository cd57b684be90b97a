// Issue 15, eleventh session (docs/cost.md, "The aligned move and the full
// flush on this host"): one flush_tlb_range() inside mremap(), priced by
// changing nothing but the number of flushes. The move is not PMD-aligned
// (the destination is offset by OFF within a PMD), so move_page_tables()
// moves PTEs extent by extent, each extent ending at a source or a
// destination PMD boundary, and move_ptes() flushes an extent's range
// only if it moved a present PTE. Every source PMD holds two populated
// pages:
//   same   both in the PMD's first extent: one flush per PMD
//   split  one in each of the PMD's two extents: two flushes per PMD
// Same PTEs moved, same extents walked, same tables: split - same is one
// flush_tlb_range() per PMD. With OFF = 1 MiB both extents are 256 pages
// (> 33: full flush of the mm); with OFF = 2 MiB - 32 KiB the second
// extent is 8 pages (<= 33: 8 INVLPGs).
// Per move: REPS round trips of K PMDs in the thread's CPU time / (2 REPS);
// minimum over ROUNDS, interleaved.
// gcc -O2 -o mremap-extent mremap-extent.c && ./mremap-extent ROUNDS REPS
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#define PMD (2UL << 20)
#define SRC 0x7f0000200000UL
#define DSTBASE 0x7f8000200000UL
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static const unsigned long offs[2] = {1UL << 20, (2UL << 20) - (32UL << 10)};
static const char *oname[2] = {"OFF=1MiB (256+256 pages, full flushes)", "OFF=2MiB-32KiB (504+8 pages, 8-page flush)"};
#define K 64
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11;
  int reps = argc > 2 ? atoi(argv[2]) : 50;
  static double best[2][2];
  for (int o = 0; o < 2; o++) best[o][0] = best[o][1] = 1e30;
  size_t len = K * PMD;
  for (int r = 0; r < rounds; r++)
    for (int o = 0; o < 2; o++)
      for (int v = 0; v < 2; v++) {
        char *p = mmap((void *)SRC, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != (char *)SRC) { perror("mmap"); return 1; }
        madvise(p, len, MADV_NOHUGEPAGE);
        // The source PMD's first extent is [0, PMD - OFF) of it.
        unsigned long second = PMD - offs[o] + 4096;
        for (int i = 0; i < K; i++) {
          p[i * PMD] = 1;
          p[i * PMD + (v ? second : 8192)] = 1;
        }
        unsigned long dst = DSTBASE + offs[o];
        for (int w = 0; w < 3; w++) {
          if (mremap((void *)SRC, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)dst) != (void *)dst) { perror("mremap"); return 1; }
          if (mremap((void *)dst, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)SRC) != (void *)SRC) { perror("mremap"); return 1; }
        }
        double t0 = now();
        for (int k = 0; k < reps; k++) {
          mremap((void *)SRC, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)dst);
          mremap((void *)dst, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)SRC);
        }
        double t = (now() - t0) / (2.0 * reps);
        if (t < best[o][v]) best[o][v] = t;
        munmap((void *)SRC, len);
      }
  printf("ns per mremap of %d PMDs, 2 populated pages each (min of %d rounds x %d round trips); load: ", K, rounds, reps);
  fflush(stdout);
  system("cat /proc/loadavg");
  for (int o = 0; o < 2; o++)
    printf("%s: same %.0f, split %.0f: one more flush_tlb_range per PMD = %.1f ns\n", oname[o], best[o][0], best[o][1], (best[o][1] - best[o][0]) / K);
  return 0;
}
