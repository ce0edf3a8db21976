// The cost of one NVTX push/pop pair, with nothing else in the loop: run it bare, under
// cufall (`cufall record --nvml-only --capture nvtx -- ./nvtx_loop`) and under CUPTI's own NVTX
// handling (`CUPTI_FLOOR_NVTX=1 CUDA_INJECTION64_PATH=... NVTX_INJECTION64_PATH=libcupti_floor.so`).
// Needs no GPU: the NVTX v3 headers are header-only.
//
//   gcc -O2 -o nvtx_loop nvtx_loop.c -I/usr/local/cuda/include -ldl
//   ./nvtx_loop 2000000        # prints {"pairs":N,"ns_per_pair":X}
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  long n=argc>1?atol(argv[1]):2000000;
  nvtxRangePushA("warm"); nvtxRangePop();
  double t0=now();
  for(long i=0;i<n;i++){ nvtxRangePushA("verify"); nvtxRangePop(); }
  double t1=now();
  printf("{\"pairs\":%ld,\"ns_per_pair\":%.1f}\n",n,(t1-t0)*1e9/n);
  return 0;
}
