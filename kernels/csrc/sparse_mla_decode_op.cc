// vllm_backport::sparse_mla_decode_fp8: the torch op over vbk_sparse_mla_decode_cuda (see
// sparse_mla_decode_kernel.cu). The Python launcher (kernels/triton/flash_mla_sm8x.py) checks the
// user-facing contract and names the fix; the checks here guard the raw pointers.

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "sparse_mla_decode.h"

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

static VbkSlotList slot_list(const Tensor& cache, const Tensor& indices, const Tensor& lengths, int64_t block_size,
                             int64_t page_stride, int64_t batch, int64_t s_q) {
  STD_TORCH_CHECK(cache.is_cuda() && cache.element_size() == 1, "sparse_mla_decode_fp8: cache must be a CUDA byte tensor");
  STD_TORCH_CHECK(reinterpret_cast<uintptr_t>(cache.data_ptr()) % 16 == 0 && page_stride % 16 == 0,
                  "sparse_mla_decode_fp8: cache pages must be 16-byte aligned");
  STD_TORCH_CHECK(block_size >= 1 && block_size < (int64_t{1} << 30), "sparse_mla_decode_fp8: bad block_size");
  STD_TORCH_CHECK(indices.scalar_type() == ScalarType::Int && indices.dim() == 3 && indices.sizes()[0] == batch &&
                      indices.sizes()[1] == s_q && indices.stride(2) == 1,
                  "sparse_mla_decode_fp8: indices must be int32 [b, s_q, width] with a contiguous last dim");
  STD_TORCH_CHECK(lengths.scalar_type() == ScalarType::Int && lengths.dim() == 1 && lengths.sizes()[0] == batch &&
                      lengths.stride(0) == 1,
                  "sparse_mla_decode_fp8: lengths must be contiguous int32 [b]");
  VbkSlotList l;
  l.cache = static_cast<const uint8_t*>(cache.data_ptr());
  l.page_stride = page_stride;
  l.block_size = block_size;
  l.block_shift = -1;
  for (int shift = 0; shift < 31; ++shift)
    if ((int64_t{1} << shift) == block_size) l.block_shift = shift;
  l.indices = static_cast<const int32_t*>(indices.data_ptr());
  l.stride_b = indices.stride(0);
  l.stride_s = indices.stride(1);
  l.width = indices.sizes()[2];
  l.lengths = static_cast<const int32_t*>(lengths.data_ptr());
  return l;
}

static void sparse_mla_decode_fp8(Tensor q, Tensor cache, Tensor indices, Tensor lengths, Tensor extra_cache,
                                  Tensor extra_indices, Tensor extra_lengths, Tensor sink, int64_t has_sink,
                                  Tensor out, Tensor lse, Tensor part_o, Tensor part_lse, int64_t block_size,
                                  int64_t page_stride, int64_t extra_block_size, int64_t extra_page_stride,
                                  int64_t extra_width, double scale_log2, int64_t stream) {
  STD_TORCH_CHECK(q.is_cuda() && q.scalar_type() == ScalarType::BFloat16 && q.dim() == 4 && q.sizes()[3] == 512 &&
                      q.stride(3) == 1,
                  "sparse_mla_decode_fp8: q must be CUDA bf16 [b, s_q, heads, 512] with a contiguous last dim");
  const int64_t batch = q.sizes()[0], s_q = q.sizes()[1], heads = q.sizes()[2];
  STD_TORCH_CHECK(reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0 && q.stride(0) % 8 == 0 && q.stride(1) % 8 == 0 &&
                      q.stride(2) % 8 == 0,
                  "sparse_mla_decode_fp8: q rows must be 16-byte aligned");
  STD_TORCH_CHECK(out.scalar_type() == ScalarType::BFloat16 && out.dim() == 4 && out.sizes()[0] == batch &&
                      out.sizes()[1] == s_q && out.sizes()[2] == heads && out.sizes()[3] == 512 && out.stride(3) == 1 &&
                      reinterpret_cast<uintptr_t>(out.data_ptr()) % 4 == 0 && out.stride(0) % 2 == 0 &&
                      out.stride(1) % 2 == 0 && out.stride(2) % 2 == 0,
                  "sparse_mla_decode_fp8: out must be bf16 [b, s_q, heads, 512], last dim contiguous, 4-byte aligned rows");
  STD_TORCH_CHECK(lse.scalar_type() == ScalarType::Float && lse.dim() == 3 && lse.sizes()[0] == batch &&
                      lse.sizes()[1] == heads && lse.sizes()[2] == s_q,
                  "sparse_mla_decode_fp8: lse must be float32 [b, heads, s_q]");
  STD_TORCH_CHECK(!has_sink || (sink.scalar_type() == ScalarType::Float && sink.dim() == 1 && sink.sizes()[0] == heads &&
                                sink.stride(0) == 1),
                  "sparse_mla_decode_fp8: sink must be contiguous float32 [heads]");
  // One split: part_o is empty and out/lse are written. More: the partial buffers.
  const int64_t splits = part_o.numel() == 0 ? 1 : part_o.dim() == 4 ? part_o.sizes()[1] : 0;
  STD_TORCH_CHECK(splits == 1 || (splits > 1 && part_o.scalar_type() == ScalarType::Float && part_o.is_contiguous() &&
                                  part_o.sizes()[0] == batch * s_q && part_o.sizes()[2] == heads &&
                                  part_o.sizes()[3] == 512),
                  "sparse_mla_decode_fp8: part_o must be empty (one split) or contiguous float32 [b * s_q, splits, heads, 512]");
  STD_TORCH_CHECK(splits == 1 || (part_lse.scalar_type() == ScalarType::Float && part_lse.is_contiguous() &&
                                  part_lse.dim() == 3 && part_lse.sizes()[0] == batch * s_q &&
                                  part_lse.sizes()[1] == splits && part_lse.sizes()[2] == heads),
                  "sparse_mla_decode_fp8: part_lse must be contiguous float32 [b * s_q, splits, heads]");
  VbkSparseDecodeArgs a;
  a.q = q.data_ptr();
  a.q_stride_b = q.stride(0);
  a.q_stride_s = q.stride(1);
  a.q_stride_h = q.stride(2);
  a.batch = batch;
  a.s_q = s_q;
  a.heads = heads;
  a.main = slot_list(cache, indices, lengths, block_size, page_stride, batch, s_q);
  a.extra = slot_list(extra_cache, extra_indices, extra_lengths, extra_block_size, extra_page_stride, batch, s_q);
  a.extra.width = extra_width;  // 0: the extra tensors only stand in for an absent second cache
  a.splits = splits;
  a.out = out.data_ptr();
  a.out_stride_b = out.stride(0);
  a.out_stride_s = out.stride(1);
  a.out_stride_h = out.stride(2);
  a.lse = static_cast<float*>(lse.data_ptr());
  a.lse_stride_b = lse.stride(0);
  a.lse_stride_h = lse.stride(1);
  a.lse_stride_s = lse.stride(2);
  a.sink = has_sink ? static_cast<const float*>(sink.data_ptr()) : nullptr;
  a.part_o = static_cast<float*>(part_o.data_ptr());
  a.part_lse = static_cast<float*>(part_lse.data_ptr());
  a.scale_log2 = static_cast<float>(scale_log2);
  if (batch * s_q == 0 || heads == 0) return;
  const char* err = vbk_sparse_mla_decode_cuda(&a, reinterpret_cast<void*>(stream));
  STD_TORCH_CHECK(err == nullptr, "sparse_mla_decode_fp8 launch failed: ", err);
}

STABLE_TORCH_LIBRARY_FRAGMENT(vllm_backport, m) {
  m.def(
      "sparse_mla_decode_fp8(Tensor q, Tensor cache, Tensor indices, Tensor lengths, Tensor extra_cache, "
      "Tensor extra_indices, Tensor extra_lengths, Tensor sink, int has_sink, Tensor(a!) out, Tensor(b!) lse, "
      "Tensor(c!) part_o, Tensor(d!) part_lse, int block_size, int page_stride, int extra_block_size, "
      "int extra_page_stride, int extra_width, float scale_log2, int stream) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(vllm_backport, CUDA, m) { m.impl("sparse_mla_decode_fp8", TORCH_BOX(&sparse_mla_decode_fp8)); }
