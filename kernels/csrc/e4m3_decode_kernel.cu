// Device half of vllm_backport::e4m3_decode: integer-bit e4m3 -> float32, one thread per code.
// Kept free of torch headers and anonymous namespaces: internal-linkage device symbols get a
// per-run module id from cudafe++, which would make the .so bytes differ between builds.

#include <cstdint>

#include "e4m3_codec.cuh"
#include "e4m3_decode.h"

__global__ void vbk_e4m3_decode_kernel(const uint8_t* in, float* out, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = vbk_e4m3_to_float(in[i]);
}

const char* vbk_e4m3_decode_cuda(const uint8_t* in, float* out, int64_t n, void* stream) {
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  vbk_e4m3_decode_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(in, out, n);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

void vbk_e4m3_decode_cpu(const uint8_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = vbk_e4m3_to_float(in[i]);
}
