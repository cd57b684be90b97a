// Issue 15, eleventh session: a replica of `ptlab calibrate`'s full-flush
// series (mremap_flush_same / mremap_flush_split in calibrate.rs): K = 8,
// 16, 32 PMDs at BASE + 2 MiB moved to BASE + 1 GiB + 1 MiB and back, 20
// round trips per point, two populated pages per PMD in one 256-page
// extent ("same") or one in each ("split"); per repetition, each point the
// minimum of ROUNDS interleaved rounds, and the slope per PMD over K of
// each layout, in wall time (what calibrate times) and the thread's CPU
// time. ROUNDS = 1 is the first version of the series, 7 the committed one.
// gcc -O2 -o flush-series flush-series.c && ./flush-series REPS ROUNDS
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#define PMD (2UL<<20)
#define BASE 0x7e0000000000UL
#define SRC (BASE+PMD)
#define OFF (1UL<<20)
#define DST (BASE+(1UL<<30)+OFF)
static double t(clockid_t c){struct timespec s;clock_gettime(c,&s);return s.tv_sec*1e9+s.tv_nsec;}
static void mv(unsigned long a,size_t l,unsigned long b){if(mremap((void*)a,l,l,MREMAP_MAYMOVE|MREMAP_FIXED,(void*)b)!=(void*)b){perror("mremap");exit(1);}}
int main(int argc,char**argv){int reps=argc>1?atoi(argv[1]):20;int R=argc>2?atoi(argv[2]):7;int ks[3]={8,16,32};
 for(int r=0;r<reps;r++){double w[2][3],c[2][3];for(int a=0;a<2;a++)for(int b=0;b<3;b++)w[a][b]=c[a][b]=1e30;
  for(int rr=0;rr<R;rr++)for(int j=0;j<3;j++)for(int split=0;split<2;split++){size_t len=ks[j]*PMD;
   char*p=mmap((void*)SRC,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED_NOREPLACE,-1,0);
   if(p!=(char*)SRC){perror("mmap");return 1;} madvise(p,len,MADV_NOHUGEPAGE);
   unsigned long second=split?OFF+4096:8192;
   for(int i=0;i<ks[j];i++){p[i*PMD]=1;p[i*PMD+second]=1;}
   for(int k=0;k<2;k++){mv(SRC,len,DST);mv(DST,len,SRC);}
   double w0=t(CLOCK_MONOTONIC),c0=t(CLOCK_THREAD_CPUTIME_ID);
   for(int k=0;k<20;k++){mv(SRC,len,DST);mv(DST,len,SRC);}
   {double ww=(t(CLOCK_MONOTONIC)-w0)/40,cc=(t(CLOCK_THREAD_CPUTIME_ID)-c0)/40;if(ww<w[split][j])w[split][j]=ww;if(cc<c[split][j])c[split][j]=cc;}
   munmap(p,len);}
  // slope over K by least squares
  double sl[2][2];for(int s=0;s<2;s++)for(int m=0;m<2;m++){double*y=m?c[s]:w[s];double sx=0,sy=0,sxx=0,sxy=0;for(int j=0;j<3;j++){sx+=ks[j];sy+=y[j];sxx+=ks[j]*ks[j];sxy+=ks[j]*y[j];}sl[s][m]=(3*sxy-sx*sy)/(3*sxx-sx*sx);}
  printf("rep %2d wall: same %.0f split %.0f diff %.0f | cpu: same %.0f split %.0f diff %.0f ns/PMD\n",r,sl[0][0],sl[1][0],sl[1][0]-sl[0][0],sl[0][1],sl[1][1],sl[1][1]-sl[0][1]);}
 return 0;}
