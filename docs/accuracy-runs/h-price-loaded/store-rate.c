/* The store-rate table of docs/cost.md ("The store rate"): gcc -O2 -o store-rate store-rate.c && ./store-rate 7
   (per size, 64 MiB and 1 GiB of 4 KiB pages: each case prepares the buffer with `from`, then times one memset/explicit_bzero call; min and median over the repetitions). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
/* per size: min and median ns/4KiB over reps of: prep the buffer with value `from`, then time f(value `to`) */
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t sizes[]={64u<<20,1024u<<20};
  int reps=argc>1?atoi(argv[1]):7;
  char *p=mmap(0,1024u<<20,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  madvise(p,1024u<<20,MADV_NOHUGEPAGE);
  memset(p,1,1024u<<20);
  const char* names[]={"memset 5a over 5a","bzero over 0","bzero over 5a","memset 5a over 0","memset 0 over 0"};
  int from[]={0x5a,0,0x5a,0,0}; int to[]={0x5a,0,0,0x5a,0}; int isbz[]={0,1,1,0,0};
  double res[2][5][64];
  for(int r=0;r<reps;r++) for(int i=0;i<2;i++) for(int c=0;c<5;c++){
    size_t n=sizes[i];
    memset(p,from[c],n);
    double t=now();
    if(isbz[c]) explicit_bzero(p,n); else memset(p,to[c],n);
    res[i][c][r]=(now()-t)/(n/4096);
  }
  for(int i=0;i<2;i++) for(int c=0;c<5;c++){
    qsort(res[i][c],reps,sizeof(double),cmp);
    printf("%5zu MiB %-20s min %6.1f median %6.1f ns/4KiB\n",sizes[i]>>20,names[c],res[i][c][0],res[i][c][reps/2]);
  }
}
