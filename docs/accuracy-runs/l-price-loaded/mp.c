/* mprotect r / rw pairs over 64 MiB of PTE-mapped THPs (argv[1] = 1) or
 * of 4 KiB pages (argv[1] = 0), argv[2] pairs, ns per page per pair.
 * The THPs: MADV_HUGEPAGE under enabled=madvise, each 2 MiB PMD split
 * by MADV_DONTFORK / MADV_DOFORK of its first page (as ptlab calibrate
 * does; the layout is not verified here). Used for the perf profile in
 * docs/cost.md, "The per-entry round trip of mprotect":
 *   gcc -O2 -o mp mp.c && perf record -F 20000 ./mp 1 300 && perf report
 */
#include <sys/mman.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define BASE ((void*)0x7e0000000000UL)
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  int thp=atoi(argv[1]); int iters=atoi(argv[2]); size_t len=64UL<<20;
  char*p=mmap(BASE,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED,-1,0);
  if(thp) madvise(p,len,MADV_HUGEPAGE); else madvise(p,len,MADV_NOHUGEPAGE);
  memset(p,1,len);
  if(thp) for(size_t i=0;i<len;i+=2<<20){madvise(p+i,4096,MADV_DONTFORK);madvise(p+i,4096,MADV_DOFORK);}
  double t=now();
  for(int k=0;k<iters;k++){mprotect(p,len,PROT_READ);mprotect(p,len,PROT_READ|PROT_WRITE);}
  printf("thp=%d %.2f ns/page per r+rw pair\n",thp,(now()-t)/iters/(len/4096));
  return 0;}
