// First touch of fresh anonymous memory, with transparent huge pages and with 4 KiB pages, then a
// memset of the same memory: what a fresh process pays to fault in the arrays it makes.
//   gcc -O2 -o /tmp/first-touch bench/probes/first_touch.c && /tmp/first-touch MIB 1|0
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){ size_t n=(size_t)atoi(v[1])<<20; int huge=atoi(v[2]);
 char*p=mmap(0,n+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(char*)(((unsigned long)p+(2<<20)-1)&~((2ul<<20)-1));
 madvise(p,n,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE);
 double t=now(); for(size_t i=0;i<n;i+=4096) p[i]=1; double t1=now()-t;
 t=now(); memset(p,2,n); double t2=now()-t;
 printf("%s: first touch %.2f GB/s, then memset %.2f GB/s\n",huge?"THP ":"4K  ",n/t1/1e9,n/t2/1e9);}
