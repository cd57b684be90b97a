// Issue 15, eleventh session (docs/cost.md, "The aligned move and the full
// flush on this host"): the full TLB flush priced directly at x86-64's
// ceiling. mprotect(PROT_READ) of N populated order-0 pages flushes them
// through flush_tlb_mm_range(): N <= 33 (tlb_single_page_flush_ceiling)
// by one INVLPG per page, N >= 34 by one full flush of the mm; the
// mprotect(PROT_READ|PROT_WRITE) back needs no flush on x86-64. Each VMA
// is exactly N pages (guard gaps between them), so no call splits or
// merges a VMA: across the ceiling only the flush changes.
// Controls with the same VMAs and calls but no flush at all: zero-page
// PTEs (read-faulted: the PTE is read-only already, so the RO pass changes
// nothing that needs a flush, and no struct page is read) and no PTEs
// (never touched: the walk finds no page table).
// Per pair: REPS pairs timed in the thread's CPU time; minimum over ROUNDS,
// rounds interleaved over N. Fits: slope below (N = 8..33) and above
// (N = 34..64) the ceiling, and the step at the ceiling.
// gcc -O2 -o mp-ceiling mp-ceiling.c && ./mp-ceiling ROUNDS REPS
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static const int ns[] = {1, 2, 4, 8, 12, 16, 20, 24, 28, 30, 31, 32, 33,
                         34, 35, 36, 40, 44, 48, 56, 64};
#define NN (int)(sizeof ns / sizeof ns[0])
static void fit(const double *y, int lo, int hi, double *b, double *a) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (int j = 0; j < NN; j++)
    if (ns[j] >= lo && ns[j] <= hi) {
      sx += ns[j]; sy += y[j]; sxx += (double)ns[j] * ns[j]; sxy += ns[j] * y[j]; n++;
    }
  *b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  *a = (sy - *b * sx) / n;
}
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  int reps = argc > 2 ? atoi(argv[2]) : 3000;
  char *v[3][NN];
  const char *kn[3] = {"anon", "zero", "none"};
  for (int kind = 0; kind < 3; kind++)
  for (int j = 0; j < NN; j++) {
    // N pages plus a guard page that stays unmapped.
    char *p = mmap(0, (ns[j] + 1) * 4096UL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    munmap(p + ns[j] * 4096UL, 4096);
    madvise(p, ns[j] * 4096UL, MADV_NOHUGEPAGE);
    if (kind == 0) memset(p, 1, ns[j] * 4096UL);
    if (kind == 1)
      for (int i = 0; i < ns[j]; i++) (void)*(volatile char *)(p + i * 4096UL);
    v[kind][j] = p;
  }
  static double best3[3][NN];
  for (int kind = 0; kind < 3; kind++)
    for (int j = 0; j < NN; j++) best3[kind][j] = 1e30;
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < NN; j++)
    for (int kind = 0; kind < 3; kind++) {
      size_t len = ns[j] * 4096UL;
      double t0 = now();
      for (int k = 0; k < reps; k++) {
        mprotect(v[kind][j], len, PROT_READ);
        mprotect(v[kind][j], len, PROT_READ | PROT_WRITE);
      }
      double t = (now() - t0) / reps;
      if (t < best3[kind][j]) best3[kind][j] = t;
    }
  printf("ns per mprotect r+rw pair of N pages (min of %d rounds x %d pairs); load: ", rounds, reps);
  fflush(stdout);
  system("cat /proc/loadavg");
  printf("N     %8s %8s %8s %9s\n", kn[0], kn[1], kn[2], "anon-zero");
  for (int j = 0; j < NN; j++)
    printf("N=%-3d %8.1f %8.1f %8.1f %9.1f\n", ns[j], best3[0][j], best3[1][j], best3[2][j], best3[0][j] - best3[1][j]);
  for (int kind = 0; kind < 4; kind++) {
  double best[NN];
  for (int j = 0; j < NN; j++) best[j] = kind < 3 ? best3[kind][j] : best3[0][j] - best3[1][j];
  printf("-- %s\n", kind < 3 ? kn[kind] : "anon - zero (the flush and the struct pages)");
  double bs, as, bm, am;
  fit(best, 8, 33, &bs, &as);
  fit(best, 34, 64, &bm, &am);
  int i33 = 0, i34 = 0;
  for (int j = 0; j < NN; j++) { if (ns[j] == 33) i33 = j; if (ns[j] == 34) i34 = j; }
  printf("slope N=8..33 (INVLPG per page): %.2f ns/page, intercept %.1f\n", bs, as);
  printf("slope N=34..64 (one full flush): %.2f ns/page, intercept %.1f\n", bm, am);
  printf("per INVLPG (slope difference): %.2f ns\n", bs - bm);
  printf("intercept difference (full flush minus nothing, extrapolated): %.1f ns\n", am - as);
  printf("step 33 -> 34: %.1f ns; full flush = step - page + 33 x INVLPG = %.1f ns\n",
         best[i34] - best[i33], best[i34] - best[i33] - bm + 33 * (bs - bm));
  printf("lines at 33.5: below %.1f, above %.1f: full flush - 33.5 INVLPG = %.1f -> full flush %.1f ns\n",
         as + bs * 33.5, am + bm * 33.5, (am + bm * 33.5) - (as + bs * 33.5),
         (am + bm * 33.5) - (as + bs * 33.5) + 33.5 * (bs - bm));
  }
  return 0;
}
