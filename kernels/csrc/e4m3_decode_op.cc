// vllm_backport::e4m3_decode(Tensor codes, int stream) -> Tensor
//
// The CUDA C++ half of the per-SM shared object: decodes uint8 e4m3 (float8_e4m3fn) codes to
// float32 on CPU or CUDA, as a cross-check of the Triton codec and proof that stable-ABI ops built
// by tools/bazel/cuda/defs.bzl load and run. The CUDA stream comes from Python
// (torch.cuda.current_stream().cuda_stream), so the .so needs no CUDA-only torch symbol and also
// loads in the CPU torch the tests use.

#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "e4m3_decode.h"
#include "op_alloc.h"

static torch::stable::Tensor e4m3_decode(torch::stable::Tensor codes, int64_t stream) {
  STD_TORCH_CHECK(codes.scalar_type() == torch::headeronly::ScalarType::Byte,
                  "e4m3_decode expects uint8 codes; view float8 data with .view(torch.uint8)");
  torch::stable::Tensor in = torch::stable::contiguous(codes);
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  torch::stable::Tensor out = empty_on_device_of(in, shape, aoti_torch_dtype_float32(), "e4m3_decode");
  const int64_t n = in.numel();
  const uint8_t* src = static_cast<const uint8_t*>(in.data_ptr());
  float* dst = static_cast<float*>(out.data_ptr());
  if (n == 0) return out;
  if (in.is_cuda()) {
    const char* err = vbk_e4m3_decode_cuda(src, dst, n, reinterpret_cast<void*>(stream));
    STD_TORCH_CHECK(err == nullptr, "e4m3_decode launch failed: ", err);
  } else {
    vbk_e4m3_decode_cpu(src, dst, n);
  }
  return out;
}

STABLE_TORCH_LIBRARY(vllm_backport, m) { m.def("e4m3_decode(Tensor codes, int stream) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(vllm_backport, CPU, m) { m.impl("e4m3_decode", TORCH_BOX(&e4m3_decode)); }

STABLE_TORCH_LIBRARY_IMPL(vllm_backport, CUDA, m) { m.impl("e4m3_decode", TORCH_BOX(&e4m3_decode)); }
