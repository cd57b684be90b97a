// Issue 15, eleventh session (docs/cost.md, "The aligned move and the full
// flush on this host"): the per-PMD cost of an aligned mremap() that moves
// whole page tables (move_normal_pmd(), one full TLB flush per PMD on
// x86-64) against controls that change one thing each:
//   pte1   K PMDs of PTE tables, one page populated per PMD
//   pte512 K PMDs of PTE tables, every page populated (as the seed arm)
//   empty  K PMDs mapped, never touched: no table, the loop only walks
//   thp    K PMD-mapped THPs (MADV_HUGEPAGE): move_huge_pmd(), whose
//          flush_pmd_tlb_range() is one entry at PMD stride (an INVLPG,
//          not a full flush)
// each pinned to one CPU (sched_setaffinity) and free to migrate, rounds
// interleaved. Per move: REPS round trips (src -> dst -> src) timed in the
// thread's CPU time, divided by 2*REPS; the minimum over ROUNDS.
// Source and destination are 2 MiB- but not 1 GiB-aligned, as in the seed.
// Also counts this machine's "TLB shootdowns" (/proc/interrupts, both
// CPUs, every process) during each mode's moves.
// gcc -O2 -o mremap-pmd mremap-pmd.c && ./mremap-pmd ROUNDS
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#define PMD (2UL << 20)
#define SRC 0x7f0000200000UL
#define DST 0x7f8000200000UL
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static long shootdowns(void) {
  FILE *f = fopen("/proc/interrupts", "r");
  char line[4096];
  long sum = 0;
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (*p == ' ') p++;
    if (strncmp(p, "TLB:", 4)) continue;
    p += 4;
    for (;;) {
      char *e;
      long v = strtol(p, &e, 10);
      if (e == p) break;
      sum += v;
      p = e;
    }
  }
  fclose(f);
  return sum;
}
enum { PTE1, PTE512, EMPTY, THP, NKIND };
static const char *kname[NKIND] = {"pte1", "pte512", "empty", "thp"};
static void setup(int kind, int k) {
  size_t len = k * PMD;
  char *p = mmap((void *)SRC, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != (char *)SRC) { perror("mmap"); exit(1); }
  madvise(p, len, kind == THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  if (kind == PTE1)
    for (int i = 0; i < k; i++) p[i * PMD] = 1;
  if (kind == PTE512 || kind == THP) memset(p, 1, len);
}
static long thp_kib(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char l[256];
  long v = -1;
  while (f && fgets(l, sizeof l, f))
    if (!strncmp(l, "AnonHugePages:", 14)) v = atol(l + 14);
  if (f) fclose(f);
  return v;
}
static double move_rt(int k, int reps) {
  size_t len = k * PMD;
  double t0 = now();
  for (int r = 0; r < reps; r++) {
    if (mremap((void *)SRC, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)DST) != (void *)DST) { perror("mremap"); exit(1); }
    if (mremap((void *)DST, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)SRC) != (void *)SRC) { perror("mremap back"); exit(1); }
  }
  return (now() - t0) / (2.0 * reps);
}
#define NK 8
static const int ks[NK] = {1, 2, 4, 8, 16, 32, 48, 64};
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  int reps = argc > 2 ? atoi(argv[2]) : 100;
  cpu_set_t all, one;
  sched_getaffinity(0, sizeof all, &all);
  static double best[2][NKIND][NK];
  long tlb[2] = {0, 0}, moves[2] = {0, 0};
  for (int m = 0; m < 2; m++)
    for (int i = 0; i < NKIND; i++)
      for (int j = 0; j < NK; j++) best[m][i][j] = 1e30;
  for (int r = 0; r < rounds; r++)
    for (int m = 0; m < 2; m++) {
      if (m == 0) {
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        sched_setaffinity(0, sizeof one, &one);
      } else
        sched_setaffinity(0, sizeof all, &all);
      for (int i = 0; i < NKIND; i++)
        for (int j = 0; j < NK; j++) {
          setup(i, ks[j]);
          if (i == THP && r == 0 && m == 0 && j == NK - 1)
            fprintf(stderr, "thp: %ld KiB of %d KiB PMD-mapped\n", thp_kib(), ks[j] * 2048);
          move_rt(ks[j], 2); // warm: the destination's tables exist
          long t0 = shootdowns();
          double v = move_rt(ks[j], reps);
          tlb[m] += shootdowns() - t0;
          moves[m] += 2L * reps;
          if (v < best[m][i][j]) best[m][i][j] = v;
          munmap((void *)SRC, ks[j] * PMD);
        }
    }
  const char *mn[2] = {"pinned", "free"};
  printf("ns per move (min of %d rounds x %d round trips); load: ", rounds, reps);
  fflush(stdout);
  system("cat /proc/loadavg");
  for (int m = 0; m < 2; m++) {
    printf("%s: machine-wide TLB shootdowns during the timed moves: %ld over %ld moves\n", mn[m], tlb[m], moves[m]);
    printf("%-7s %-7s", mn[m], "K");
    for (int j = 0; j < NK; j++) printf(" %8d", ks[j]);
    printf("   slope/PMD (K=8..64)\n");
    for (int i = 0; i < NKIND; i++) {
      printf("%-7s %-7s", "", kname[i]);
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      int n = 0;
      for (int j = 0; j < NK; j++) {
        printf(" %8.0f", best[m][i][j]);
        if (ks[j] >= 8) { sx += ks[j]; sy += best[m][i][j]; sxx += ks[j] * ks[j]; sxy += ks[j] * best[m][i][j]; n++; }
      }
      double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
      printf("   %7.1f (intercept %.0f)\n", b, (sy - b * sx) / n);
    }
  }
  return 0;
}
