// Launch-heavy benchmark for cufall's capture overhead: N empty kernels on one stream, optionally
// wrapped in NVTX ranges, timed on the host. Run it bare, under the CUPTI-only floor
// (cupti_floor.c) and under `cufall record --capture nvtx,kernels`, and compare us_per_launch.
//
//   nvcc -O2 -arch=sm_90 -o launch_loop launch_loop.cu -ldl
//   ./launch_loop --launches 1000000 --nvtx per-launch
//   CUDA_INJECTION64_PATH=$PWD/libcupti_floor.so ./launch_loop
//
// Prints one JSON line: {"launches":N,"nvtx":"...","seconds":S,"us_per_launch":X}
// (-ldl: the header-only NVTX v3 finds its injection library with dlopen.)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

__global__ void empty_kernel() {}

enum Nvtx { OFF, PER_LAUNCH, PER_BATCH };
static const char *nvtx_names[] = {"off", "per-launch", "per-batch"};
static const long BATCH = 1000;

static void usage() {
  fprintf(stderr, "usage: launch_loop [--launches N] [--nvtx off|per-launch|per-batch] [--warmup N]\n");
  exit(2);
}

// The same loop runs the warm-up and the timed launches, so NVTX's lazy set-up (it loads the
// injection library on the first call) happens before the clock starts.
static void launch(long n, Nvtx mode) {
  for (long i = 0; i < n; i++) {
    if (mode == PER_LAUNCH) nvtxRangePushA("launch");
    if (mode == PER_BATCH && i % BATCH == 0) nvtxRangePushA("batch");
    empty_kernel<<<1, 32>>>();
    if (mode == PER_LAUNCH) nvtxRangePop();
    if (mode == PER_BATCH && (i % BATCH == BATCH - 1 || i == n - 1)) nvtxRangePop();
  }
}

int main(int argc, char **argv) {
  long launches = 1000000, warmup = 10000;
  Nvtx mode = OFF;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) usage();
    if (!strcmp(argv[i], "--launches")) launches = atol(argv[++i]);
    else if (!strcmp(argv[i], "--warmup")) warmup = atol(argv[++i]);
    else if (!strcmp(argv[i], "--nvtx")) {
      const char *m = argv[++i];
      if (!strcmp(m, "off")) mode = OFF;
      else if (!strcmp(m, "per-launch")) mode = PER_LAUNCH;
      else if (!strcmp(m, "per-batch")) mode = PER_BATCH;
      else usage();
    } else usage();
  }
  if (launches <= 0 || warmup < 0) usage();

  launch(warmup, mode);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fprintf(stderr, "launch_loop: warm-up: %s\n", cudaGetErrorString(err));
    return 1;
  }

  auto t0 = std::chrono::steady_clock::now();
  launch(launches, mode);
  err = cudaDeviceSynchronize();
  auto t1 = std::chrono::steady_clock::now();
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    fprintf(stderr, "launch_loop: %s\n", cudaGetErrorString(err));
    return 1;
  }

  double s = std::chrono::duration<double>(t1 - t0).count();
  printf("{\"launches\":%ld,\"nvtx\":\"%s\",\"seconds\":%.6f,\"us_per_launch\":%.4f}\n", launches,
         nvtx_names[mode], s, s * 1e6 / launches);
  return 0;
}
