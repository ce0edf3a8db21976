// NVTX stress test for cufall's capture: a million push/pop ranges of every kind cufall must
// record (plain and with attributes, nested, start/end, marks, a custom domain with a registered
// string), one empty kernel per range. The JSON line gives the exact counts emitted, to compare
// with what the trace holds.
//
//   nvcc -O2 -arch=sm_90 -o nvtx_stress nvtx_stress.cu -ldl
//   ./nvtx_stress --ranges 1000000
//
// Prints {"push_pop":..,"start_end":..,"marks":..,"domain_ranges":..,"kernels":..,"seconds":..}.
// push_pop counts default-domain push/pop pairs (nested ones included); domain_ranges counts the
// "cufall-test" domain's separately.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

__global__ void empty_kernel() {}

static const char *names[] = {"step", "draft", "verify"};
static const uint32_t colors[] = {0xFF4C9BE8, 0xFFE8A33C, 0xFF5CC45C};  // ARGB

int main(int argc, char **argv) {
  long ranges = 1000000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: nvtx_stress [--ranges N]\n");
      return 2;
    }
  }
  if (ranges <= 0) return 2;

  nvtxDomainHandle_t dom = nvtxDomainCreateA("cufall-test");
  nvtxStringHandle_t dom_name = nvtxDomainRegisterStringA(dom, "registered-range");

  nvtxEventAttributes_t attr;
  memset(&attr, 0, sizeof attr);
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.colorType = NVTX_COLOR_ARGB;
  attr.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;

  nvtxEventAttributes_t dom_attr = attr;
  dom_attr.payloadType = NVTX_PAYLOAD_UNKNOWN;
  dom_attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  dom_attr.message.registered = dom_name;

  long push_pop = 0, start_end = 0, marks = 0, domain_ranges = 0, kernels = 0;
  nvtxRangeId_t open_id = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < ranges; i++) {
    int k = i % 3;
    // Start/end ranges span 1000 iterations, so they overlap the push/pop stack rather than nest.
    if (i % 1000 == 0) {
      open_id = nvtxRangeStartA("span1000");
      start_end++;
      nvtxMarkA("mark1000");
      marks++;
    }
    // A third with attributes (i % 9 < 3 still cycles through all three names).
    if (i % 9 < 3) {
      attr.color = colors[k];
      attr.category = 1 + k;
      attr.payload.llValue = i;
      attr.message.ascii = names[k];
      nvtxRangePushEx(&attr);
    } else {
      nvtxRangePushA(names[k]);
    }
    push_pop++;
    bool nested = k == 0 && i % 10 == 0;  // every 30th iteration: "verify" inside "step"
    if (nested) {
      nvtxRangePushA("verify");
      push_pop++;
    }
    empty_kernel<<<1, 32>>>();
    kernels++;
    if (nested) nvtxRangePop();
    nvtxRangePop();
    if (i % 100 == 0) {
      nvtxDomainRangePushEx(dom, &dom_attr);
      nvtxDomainRangePop(dom);
      domain_ranges++;
    }
    if (i % 1000 == 999 || i == ranges - 1) nvtxRangeEnd(open_id);
  }
  cudaError_t err = cudaDeviceSynchronize();
  auto t1 = std::chrono::steady_clock::now();
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    fprintf(stderr, "nvtx_stress: %s\n", cudaGetErrorString(err));
    return 1;
  }

  printf("{\"push_pop\":%ld,\"start_end\":%ld,\"marks\":%ld,\"domain_ranges\":%ld,\"kernels\":%ld,"
         "\"seconds\":%.6f}\n",
         push_pop, start_end, marks, domain_ranges, kernels,
         std::chrono::duration<double>(t1 - t0).count());
  return 0;
}
