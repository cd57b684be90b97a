// Issue 15, tenth session (docs/cost.md, "The order-0 mprotect arm and the
// struct-page line"): where the order-0 mprotect arm's time goes.
// One 1 GiB order-0 region, as the seed arms meet it: the mprotect r+rw pair
// after the region's own explicit_bzero (seed 4) and fork() of it (seed 3,
// the call alone, best of 3), each beside the same call over a 1 GiB region
// of zero-page PTEs (vm_normal_page() NULL: no struct page touched); the
// difference is each call's struct-page work per page on the same frames.
// Also calibrate's streaming series (128 MiB VMA, 64..16384 pages, each
// pair after a 520 MiB sweep) and its zero-page control.
// Timed in the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): a
// shared machine's other jobs do not add their time slices.
// gcc -O2 -o mp-order0 mp-order0.c && ./mp-order0 ROUNDS   (root: frame statistics)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <stdint.h>
// Physical order of a region's frames (root: /proc/self/pagemap gives PFNs):
// the fraction of neighbouring virtual pages whose frames are +1, -1, or
// neither; and the number of distinct 4 KiB memmap pages (64 struct pages
// each) their struct pages lie in, per 64 pages.
static void pfn_stats(const char*what,char*p,size_t len){
 size_t n=len/4096; uint64_t*e=malloc(n*8); int fd=open("/proc/self/pagemap",O_RDONLY);
 if(fd<0||pread(fd,e,n*8,((uintptr_t)p/4096)*8)!=(ssize_t)(n*8)){perror("pagemap");return;}
 close(fd); size_t up=0,down=0,jump=0,absent=0; 
 for(size_t i=0;i<n;i++){ if(!(e[i]>>63)) absent++; e[i]&=((1ULL<<55)-1);}
 for(size_t i=0;i+1<n;i++){ if(e[i+1]==e[i]+1)up++; else if(e[i+1]+1==e[i])down++; else jump++;}
 // distinct memmap pages: sort pfn>>6
 uint64_t*m=malloc(n*8); for(size_t i=0;i<n;i++)m[i]=e[i]>>6;
 int c(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
 qsort(m,n,8,c); size_t d=0; for(size_t i=0;i<n;i++) if(i==0||m[i]!=m[i-1]) d++;
 printf("  %-28s frames: +1 %5.1f%%  -1 %5.1f%%  jump %5.1f%%  absent %zu; memmap pages %zu (min %zu)\n",what,100.0*up/n,100.0*down/n,100.0*jump/n,absent,d,(n+63)/64);
 free(e);free(m);}
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e9+t.tv_nsec;}
static char *map(size_t len,int zero){char*p=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 if(p==MAP_FAILED){perror("mmap");exit(1);} madvise(p,len,MADV_NOHUGEPAGE);
 if(zero){volatile char s=0; for(size_t i=0;i<len;i+=4096) s+=((volatile char*)p)[i];}
 else for(size_t i=0;i<len;i+=4096) p[i]=1;
 return p;}
static double pair(char*p,size_t len){double t0=now();mprotect(p,len,PROT_READ);mprotect(p,len,PROT_READ|PROT_WRITE);return now()-t0;}
static double forkns(void){double best=1e30; for(int i=0;i<3;i++){double t0=now(); pid_t c=fork(); if(c==0)_exit(0); double t=now()-t0; waitpid(c,0,0); if(t<best)best=t;} return best;}
static double slope(double*x,double*y,int n){double sx=0,sy=0,sxx=0,sxy=0;for(int i=0;i<n;i++){sx+=x[i];sy+=y[i];sxx+=x[i]*x[i];sxy+=x[i]*y[i];}
 return (n*sxy-sx*sy)/(n*sxx-sx*sx);}
static int cmp(const void*a,const void*b){double d=*(double*)a-*(double*)b;return d<0?-1:d>0;}
#define K 8
static char*R_[4]; static size_t L_[4];
static void only(char*p){for(int i=0;i<4;i++) madvise(R_[i],L_[i],R_[i]==p?MADV_DOFORK:MADV_DONTFORK);}
int main(int argc,char**argv){
 int rounds=argc>1?atoi(argv[1]):7; if(rounds>64)rounds=64;
 size_t G=(size_t)1<<30, big=(size_t)128<<20, evlen=(size_t)520<<20;
 char*ev=map(evlen,0); char*arm=map(G,0), *armz=map(G,1), *cal=map(big,0), *calz=map(big,1);
 madvise(ev,evlen,MADV_DONTFORK);
 R_[0]=arm;L_[0]=G;R_[1]=armz;L_[1]=G;R_[2]=cal;L_[2]=big;R_[3]=calz;L_[3]=big;
 pfn_stats("arm 1 GiB",arm,G); pfn_stats("calib 128 MiB",cal,big);
 const char*nm[K]={"mprotect pair, arm (own bzero)","mprotect pair, zero-page control","  difference (struct-page work)",
  "fork, arm","fork, zero-page control","  difference (struct-page work)","calib streaming slope (sweep)","calib streaming slope, zero-page"};
 double res[K][64]; double pg=G/4096.0; int nn[5]={64,256,1024,4096,16384};
 for(int r=0;r<rounds;r++){
   explicit_bzero(arm,G); res[0][r]=pair(arm,G)/pg;
   explicit_bzero(ev,evlen); res[1][r]=pair(armz,G)/pg;
   res[2][r]=res[0][r]-res[1][r];
   explicit_bzero(arm,G); only(arm); res[3][r]=forkns()/pg;
   explicit_bzero(ev,evlen); only(armz); res[4][r]=forkns()/pg;
   res[5][r]=res[3][r]-res[4][r];
   double x[5],y[5],yz[5];
   for(int i=0;i<5;i++){x[i]=nn[i]; explicit_bzero(ev,evlen); y[i]=pair(cal,nn[i]*4096UL);
                        explicit_bzero(ev,evlen); yz[i]=pair(calz,nn[i]*4096UL);}
   res[6][r]=slope(x,y,5); res[7][r]=slope(x,yz,5);
 }
 printf("ns per page, %d rounds: min / median\n",rounds);
 for(int k=0;k<K;k++){qsort(res[k],rounds,sizeof(double),cmp);printf("  %-36s %6.1f / %6.1f\n",nm[k],res[k][0],res[k][rounds/2]);}
}
