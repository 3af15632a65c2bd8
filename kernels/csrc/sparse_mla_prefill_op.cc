// vllm_backport::sparse_mla_prefill_bf16: the torch op over vbk_sparse_mla_prefill_cuda (see
// sparse_mla_prefill_kernel.cu). The Python launcher (vllm_backport/kernels/sparse_mla_ops.py)
// checks the user-facing contract and names the fix; the checks here guard everything the kernel
// touches (dtypes, shapes, devices, alignment). It allocates max_logits and lse itself.

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <tuple>

#include "op_alloc.h"
#include "op_checks.h"
#include "sparse_mla_prefill.h"

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

static void on_device_of(const Tensor& t, const Tensor& q, const char* name) {
  check_on_device_of(t, q, "sparse_mla_prefill_bf16", name);
}

static bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// Returns (max_logits, lse), float32 [s_q, heads]; writes out.
static std::tuple<Tensor, Tensor> sparse_mla_prefill_bf16(Tensor q, Tensor kv, Tensor indices, Tensor lengths,
                                                          int64_t has_lengths, Tensor sink, int64_t has_sink,
                                                          Tensor out, double scale_log2, int64_t stream) {
  STD_TORCH_CHECK(q.is_cuda() && q.scalar_type() == ScalarType::BFloat16 && q.dim() == 3 && q.sizes()[2] == 512 &&
                      q.stride(2) == 1 && aligned16(q) && q.stride(0) % 8 == 0 && q.stride(1) % 8 == 0,
                  "sparse_mla_prefill_bf16: q must be CUDA bf16 [s_q, heads, 512] with 16-byte aligned rows");
  const int64_t s_q = q.sizes()[0], heads = q.sizes()[1];
  on_device_of(kv, q, "kv");
  STD_TORCH_CHECK(kv.scalar_type() == ScalarType::BFloat16 && kv.dim() == 3 && kv.sizes()[1] == 1 &&
                      kv.sizes()[2] == 512 && kv.stride(2) == 1 && aligned16(kv) && kv.stride(0) % 8 == 0,
                  "sparse_mla_prefill_bf16: kv must be bf16 [s_kv, 1, 512] with 16-byte aligned rows");
  STD_TORCH_CHECK(kv.sizes()[0] < (int64_t{1} << 31), "sparse_mla_prefill_bf16: kv has more rows than int32 indices reach");
  on_device_of(indices, q, "indices");
  STD_TORCH_CHECK(indices.scalar_type() == ScalarType::Int && indices.dim() == 3 && indices.sizes()[0] == s_q &&
                      indices.sizes()[1] == 1 && indices.stride(2) == 1 && indices.sizes()[2] < (int64_t{1} << 30),
                  "sparse_mla_prefill_bf16: indices must be int32 [s_q, 1, topk] with a contiguous last dim");
  if (has_lengths) {
    on_device_of(lengths, q, "topk_length");
    STD_TORCH_CHECK(lengths.scalar_type() == ScalarType::Int && lengths.dim() == 1 && lengths.sizes()[0] == s_q &&
                        lengths.stride(0) == 1,
                    "sparse_mla_prefill_bf16: topk_length must be contiguous int32 [s_q]");
  }
  if (has_sink) {
    on_device_of(sink, q, "sink");
    STD_TORCH_CHECK(sink.scalar_type() == ScalarType::Float && sink.dim() == 1 && sink.sizes()[0] == heads &&
                        sink.stride(0) == 1,
                    "sparse_mla_prefill_bf16: sink must be contiguous float32 [heads]");
  }
  on_device_of(out, q, "out");
  STD_TORCH_CHECK(out.scalar_type() == ScalarType::BFloat16 && out.dim() == 3 && out.sizes()[0] == s_q &&
                      out.sizes()[1] == heads && out.sizes()[2] == 512 && out.stride(2) == 1 &&
                      reinterpret_cast<uintptr_t>(out.data_ptr()) % 4 == 0 && out.stride(0) % 2 == 0 &&
                      out.stride(1) % 2 == 0,
                  "sparse_mla_prefill_bf16: out must be bf16 [s_q, heads, 512], last dim contiguous, 4-byte aligned rows");
  Tensor max_logits = empty_on_device_of(q, {s_q, heads}, aoti_torch_dtype_float32(), "sparse_mla_prefill_bf16");
  Tensor lse = empty_on_device_of(q, {s_q, heads}, aoti_torch_dtype_float32(), "sparse_mla_prefill_bf16");
  VbkSparsePrefillArgs a;
  a.q = q.data_ptr();
  a.q_stride_t = q.stride(0);
  a.q_stride_h = q.stride(1);
  a.s_q = s_q;
  a.heads = heads;
  a.kv = kv.data_ptr();
  a.kv_stride = kv.stride(0);
  a.s_kv = kv.sizes()[0];
  a.indices = static_cast<const int32_t*>(indices.data_ptr());
  a.idx_stride = indices.stride(0);
  a.topk = indices.sizes()[2];
  a.lengths = has_lengths ? static_cast<const int32_t*>(lengths.data_ptr()) : nullptr;
  a.sink = has_sink ? static_cast<const float*>(sink.data_ptr()) : nullptr;
  a.out = out.data_ptr();
  a.out_stride_t = out.stride(0);
  a.out_stride_h = out.stride(1);
  a.max_logits = static_cast<float*>(max_logits.data_ptr());
  a.lse = static_cast<float*>(lse.data_ptr());
  a.scale_log2 = static_cast<float>(scale_log2);
  if (s_q > 0 && heads > 0) {
    const char* err = vbk_sparse_mla_prefill_cuda(&a, reinterpret_cast<void*>(stream));
    STD_TORCH_CHECK(err == nullptr, "sparse_mla_prefill_bf16 launch failed: ", err);
  }
  return {max_logits, lse};
}

STABLE_TORCH_LIBRARY_FRAGMENT(vllm_backport, m) {
  m.def(
      "sparse_mla_prefill_bf16(Tensor q, Tensor kv, Tensor indices, Tensor lengths, int has_lengths, Tensor sink, "
      "int has_sink, Tensor(a!) out, float scale_log2, int stream) -> (Tensor, Tensor)");
}

STABLE_TORCH_LIBRARY_IMPL(vllm_backport, CUDA, m) {
  m.impl("sparse_mla_prefill_bf16", TORCH_BOX(&sparse_mla_prefill_bf16));
}
