/* The "CUPTI alone" floor for cufall's capture-overhead benchmark: a minimal CUDA injection
 * library that enables kernel activity records and only counts them, so the cost of CUPTI's
 * own tracing can be told apart from what cufall adds on top.
 *
 *   gcc -O2 -shared -fPIC -o libcupti_floor.so cupti_floor.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcupti -ldl -lpthread
 *   CUDA_INJECTION64_PATH=$PWD/libcupti_floor.so ./launch_loop
 *   CUDA_INJECTION64_PATH=$PWD/libcupti_floor.so CUPTI_FLOOR_MEMCPY=1 python3 torch_phases.py
 *
 *   CUPTI_FLOOR_NVTX=1 NVTX_INJECTION64_PATH=$PWD/libcupti_floor.so ./nvtx_loop
 *     (NVTX through CUPTI's own NVTX handling, with marker records enabled: the NVTX floor)
 *
 * Prints "cupti_floor: N records" to stderr at exit. If libcupti.so is not found at run time,
 * add /usr/local/cuda/lib64 (or its extras/CUPTI/lib64) to LD_LIBRARY_PATH.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>

#define BUF_SIZE (8u << 20)
#define BUF_ALIGN 8 /* CUPTI's requirement for activity buffers */

static atomic_ullong records;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(BUF_ALIGN, BUF_SIZE);
  *size = *buffer ? BUF_SIZE : 0; /* size 0: CUPTI drops the records instead of crashing */
  *max_records = 0;               /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *rec = NULL;
  unsigned long long n = 0;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) n++;
  atomic_fetch_add(&records, n);
  free(buffer);
}

static void at_exit(void) {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  fprintf(stderr, "cupti_floor: %llu records\n", (unsigned long long)atomic_load(&records));
}

static int check(CUptiResult r, const char *what) {
  if (r == CUPTI_SUCCESS) return 1;
  const char *msg = "?";
  cuptiGetResultString(r, &msg);
  fprintf(stderr, "cupti_floor: %s: %s\n", what, msg);
  return 0;
}

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int setup_ok;
static void setup(void) {
  setup_ok = check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                   "cuptiActivityRegisterCallbacks");
  if (setup_ok) atexit(at_exit);
}

/* Called by each NVTX copy on its first call (NVTX_INJECTION64_PATH): with CUPTI_FLOOR_NVTX=1,
 * enables CUPTI's marker records and hands NVTX to CUPTI's own handler. */
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(const void *(*get)(uint32_t)) {
  const char *n = getenv("CUPTI_FLOOR_NVTX");
  if (!n || strcmp(n, "1")) return 0;
  pthread_once(&setup_once, setup);
  if (!setup_ok || !check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER), "enable MARKER"))
    return 0;
  void *cupti = dlopen("libcupti.so.13", RTLD_NOLOAD | RTLD_LAZY);
  int (*forward)(const void *(*)(uint32_t)) =
      cupti ? (int (*)(const void *(*)(uint32_t)))dlsym(cupti, "InitializeInjectionNvtx2") : NULL;
  return forward ? forward(get) : 0;
}

/* Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH); 1 = success. */
__attribute__((visibility("default"))) int InitializeInjection(void) {
  pthread_once(&setup_once, setup);
  if (!setup_ok ||
      !check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable CONCURRENT_KERNEL"))
    return 0;
  const char *m = getenv("CUPTI_FLOOR_MEMCPY");
  if (m && !strcmp(m, "1") &&
      (!check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable MEMCPY") ||
       !check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable MEMSET")))
    return 0;
  return 1;
}
