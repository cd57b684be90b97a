// Issue 15, tenth session (docs/cost.md, "The order-0 mprotect arm and the
// struct-page line"): the mprotect r+rw pair per page over 4 KiB pages,
// anon pages vs zero-page PTEs (vm_normal_page() NULL: no struct page
// touched), by region size and cache state: warm (the pair repeated),
// after a 520 MiB explicit_bzero sweep of another buffer (calibrate's
// eviction), after the region's own explicit_bzero (the seed-4 arm).
// Minimum over ROUNDS of the calling thread's CPU time.
// gcc -O2 -o mp-sizes mp-sizes.c && ./mp-sizes ROUNDS
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e9+t.tv_nsec;}
static char *map(size_t len,int zero){char*p=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 if(p==MAP_FAILED){perror("mmap");exit(1);} madvise(p,len,MADV_NOHUGEPAGE);
 if(zero){volatile char s=0; for(size_t i=0;i<len;i+=4096) s+=((volatile char*)p)[i];} else memset(p,1,len);
 return p;}
#define NS 4
#define NK 2
#define NT 3
int main(int argc,char**argv){
 int rounds=argc>1?atoi(argv[1]):5;
 size_t evlen=(size_t)520<<20; char*ev=map(evlen,0);
 size_t sizes[NS]={(size_t)16<<20,(size_t)64<<20,(size_t)256<<20,(size_t)1<<30};
 const char*kn[NK]={"anon","zero"}; const char*st[NT]={"warm","sweep520","own-bzero"};
 char*reg[NS][NK]; for(int i=0;i<NS;i++)for(int k=0;k<NK;k++) reg[i][k]=map(sizes[i],k);
 static double best[NS][NK][NT][2];
 for(int i=0;i<NS;i++)for(int k=0;k<NK;k++)for(int s=0;s<NT;s++)best[i][k][s][0]=best[i][k][s][1]=1e30;
 for(int r=0;r<rounds;r++) for(int i=0;i<NS;i++) for(int k=0;k<NK;k++) for(int s=0;s<NT;s++){
   if(k==1&&s==2) continue;
   char*p=reg[i][k]; size_t len=sizes[i]; double pages=len/4096.0;
   if(s==0){mprotect(p,len,PROT_READ);mprotect(p,len,PROT_READ|PROT_WRITE);}
   if(s==1) explicit_bzero(ev,evlen);
   if(s==2) explicit_bzero(p,len);
   double t0=now(); mprotect(p,len,PROT_READ); double t1=now(); mprotect(p,len,PROT_READ|PROT_WRITE); double t2=now();
   double a=(t1-t0)/pages,b=(t2-t1)/pages;
   if(a<best[i][k][s][0])best[i][k][s][0]=a; if(b<best[i][k][s][1])best[i][k][s][1]=b;
 }
 printf("min ns/page over %d rounds\n%-8s %-5s %-10s %7s %7s %7s\n",rounds,"size","kind","state","RO","RW","pair");
 for(int i=0;i<NS;i++)for(int s=0;s<NT;s++)for(int k=0;k<NK;k++){ if(k==1&&s==2)continue;
   printf("%5zuMiB %-5s %-10s %7.1f %7.1f %7.1f\n",sizes[i]>>20,kn[k],st[s],best[i][k][s][0],best[i][k][s][1],best[i][k][s][0]+best[i][k][s][1]);}
}
