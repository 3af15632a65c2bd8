// vllm_backport::sparse_mla_decode_fp8 (writes a given out) and sparse_mla_decode_fp8_alloc (allocates
// it): the torch ops over vbk_sparse_mla_decode_cuda (see sparse_mla_decode_kernel.cu). The Python
// launcher (vllm_backport/kernels/sparse_mla_ops.py) checks a call's user-facing contract once per
// layout and names the fix; the checks here run on every call and guard everything the kernel
// touches (dtypes, shapes, devices, alignment), so a call that reuses a checked layout is still
// safe. The op allocates lse and, with several splits, the partial results in one buffer: one op
// call per decode, no allocation from Python.

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <tuple>

#include "op_alloc.h"
#include "op_checks.h"
#include "sparse_mla_decode.h"

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

static constexpr const char* kOp = "sparse_mla_decode_fp8";

static void same_device(const Tensor& t, const Tensor& q, const char* name) {
  check_on_device_of(t, q, "sparse_mla_decode_fp8", name);
}

// The cache's geometry comes from the tensor itself (vLLM's fp8_ds_mla cache, (num_blocks,
// block_size, [1,] 584) bytes): no geometry arguments to parse on every call.
static VbkSlotList slot_list(const Tensor& q, const Tensor& cache, const Tensor& indices, const Tensor& lengths,
                             int64_t batch, int64_t s_q) {
  same_device(cache, q, "the cache");
  same_device(indices, q, "indices");
  same_device(lengths, q, "lengths");
  const int64_t dims = cache.dim();
  STD_TORCH_CHECK(cache.element_size() == 1 && (dims == 3 || (dims == 4 && cache.sizes()[2] == 1)) &&
                      cache.sizes()[dims - 1] == 584 && cache.stride(dims - 1) == 1,
                  "sparse_mla_decode_fp8: cache must be fp8_ds_mla bytes (num_blocks, block_size, [1,] 584)");
  const int64_t block_size = cache.sizes()[1], page_stride = cache.stride(0);
  STD_TORCH_CHECK(block_size >= 1 && block_size < (int64_t{1} << 30) && page_stride >= block_size * 584,
                  "sparse_mla_decode_fp8: cache pages must hold block_size 584-byte rows");
  STD_TORCH_CHECK(reinterpret_cast<uintptr_t>(cache.data_ptr()) % 16 == 0 && page_stride % 16 == 0,
                  "sparse_mla_decode_fp8: cache pages must be 16-byte aligned");
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

// The contiguous [b, heads, s_q] view at the start of a flat float32 buffer.
static Tensor with_lse_view(const Tensor& buffer, int64_t batch, int64_t heads, int64_t s_q) {
  const int64_t sizes[3] = {batch, heads, s_q}, strides[3] = {heads * s_q, s_q, 1};
  AtenTensorHandle view = nullptr;
  STD_TORCH_CHECK(aoti_torch__reinterpret_tensor(buffer.get(), 3, sizes, strides, 0, &view) == AOTI_TORCH_SUCCESS,
                  "sparse_mla_decode_fp8: could not view the lse buffer");
  return Tensor(view);
}

// Returns lse, float32 [b, heads, s_q] (natural log, +inf where a head saw no token); writes out.
static Tensor sparse_mla_decode_fp8(Tensor q, Tensor cache, Tensor indices, Tensor lengths, Tensor extra_cache,
                                    Tensor extra_indices, Tensor extra_lengths, Tensor sink, int64_t has_sink,
                                    Tensor out, int64_t splits, int64_t extra_width, double scale_log2,
                                    int64_t stream) {
  STD_TORCH_CHECK(q.is_cuda() && q.scalar_type() == ScalarType::BFloat16 && q.dim() == 4 && q.sizes()[3] == 512 &&
                      q.stride(3) == 1,
                  "sparse_mla_decode_fp8: q must be CUDA bf16 [b, s_q, heads, 512] with a contiguous last dim");
  const int64_t batch = q.sizes()[0], s_q = q.sizes()[1], heads = q.sizes()[2];
  STD_TORCH_CHECK(reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0 && q.stride(0) % 8 == 0 && q.stride(1) % 8 == 0 &&
                      q.stride(2) % 8 == 0,
                  "sparse_mla_decode_fp8: q rows must be 16-byte aligned");
  same_device(out, q, "out");
  STD_TORCH_CHECK(out.scalar_type() == ScalarType::BFloat16 && out.dim() == 4 && out.sizes()[0] == batch &&
                      out.sizes()[1] == s_q && out.sizes()[2] == heads && out.sizes()[3] == 512 && out.stride(3) == 1 &&
                      reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0 && out.stride(0) % 8 == 0 &&
                      out.stride(1) % 8 == 0 && out.stride(2) % 8 == 0,
                  "sparse_mla_decode_fp8: out must be bf16 [b, s_q, heads, 512], last dim contiguous, 16-byte aligned rows");
  if (has_sink) same_device(sink, q, "sink");
  STD_TORCH_CHECK(!has_sink || (sink.scalar_type() == ScalarType::Float && sink.dim() == 1 && sink.sizes()[0] == heads &&
                                sink.stride(0) == 1),
                  "sparse_mla_decode_fp8: sink must be contiguous float32 [heads]");
  STD_TORCH_CHECK(splits == 1 || splits == 2 || splits == 3 || splits == 4 || splits == 8 || splits == 16,
                  "sparse_mla_decode_fp8: splits must be 1, 2, 3, 4, 8 or 16, got ", splits);
  VbkSparseDecodeArgs a;
  a.q = q.data_ptr();
  a.q_stride_b = q.stride(0);
  a.q_stride_s = q.stride(1);
  a.q_stride_h = q.stride(2);
  a.batch = batch;
  a.s_q = s_q;
  a.heads = heads;
  a.main = slot_list(q, cache, indices, lengths, batch, s_q);
  a.extra = slot_list(q, extra_cache, extra_indices, extra_lengths, batch, s_q);
  STD_TORCH_CHECK(extra_width >= 0 && extra_width <= a.extra.width,
                  "sparse_mla_decode_fp8: extra_width must be 0..extra_indices' width (", a.extra.width, "), got ",
                  extra_width);
  a.extra.width = extra_width;  // 0: the extra tensors only stand in for an absent second cache
  a.splits = splits;
  a.out = out.data_ptr();
  a.out_stride_b = out.stride(0);
  a.out_stride_s = out.stride(1);
  a.out_stride_h = out.stride(2);
  // lse [b, heads, s_q]; with more than one split, the partial outputs and their base-2 lse after
  // it in the same allocation (one allocator call fewer per call), so lse is then a view of a
  // larger buffer. The caching allocator hands it out on the current stream, the one launched on.
  const int64_t tokens = batch * s_q, lse_count = batch * heads * s_q;
  const int64_t part_first = (lse_count + 3) / 4 * 4;  // 16-byte aligned partial rows
  const int64_t part_count = splits > 1 ? tokens * splits * heads * 513 : 0;
  Tensor lse = splits > 1 ? with_lse_view(empty_on_device_of(q, {part_first + part_count}, aoti_torch_dtype_float32(), kOp),
                                          batch, heads, s_q)
                          : empty_on_device_of(q, {batch, heads, s_q}, aoti_torch_dtype_float32(), kOp);
  a.lse = static_cast<float*>(lse.data_ptr());
  a.lse_stride_b = heads * s_q;
  a.lse_stride_h = s_q;
  a.lse_stride_s = 1;
  a.sink = has_sink ? static_cast<const float*>(sink.data_ptr()) : nullptr;
  a.part_o = splits > 1 ? a.lse + part_first : nullptr;
  a.part_lse = splits > 1 ? a.part_o + tokens * splits * heads * 512 : nullptr;
  a.scale_log2 = static_cast<float>(scale_log2);
  if (tokens == 0 || heads == 0) return lse;
  const char* err = vbk_sparse_mla_decode_cuda(&a, reinterpret_cast<void*>(stream));
  STD_TORCH_CHECK(err == nullptr, "sparse_mla_decode_fp8 launch failed: ", err);
  return lse;
}

// The same with the output allocated here, for callers that pass no out: returns (out, lse). The
// allocation costs the host 2-3 us here against 4.3-4.7 us for torch.empty from Python (on the
// lent H200's host), next to a batch-1 decode's ~15 us of GPU time.
static std::tuple<Tensor, Tensor> sparse_mla_decode_fp8_alloc(Tensor q, Tensor cache, Tensor indices, Tensor lengths,
                                                              Tensor extra_cache, Tensor extra_indices,
                                                              Tensor extra_lengths, Tensor sink, int64_t has_sink,
                                                              int64_t splits, int64_t extra_width, double scale_log2,
                                                              int64_t stream) {
  STD_TORCH_CHECK(q.dim() == 4, "sparse_mla_decode_fp8: q must be CUDA bf16 [b, s_q, heads, 512]");
  Tensor out = empty_on_device_of(q, {q.sizes()[0], q.sizes()[1], q.sizes()[2], 512}, aoti_torch_dtype_bfloat16(), kOp);
  Tensor lse = sparse_mla_decode_fp8(q, cache, indices, lengths, extra_cache, extra_indices, extra_lengths, sink,
                                     has_sink, out, splits, extra_width, scale_log2, stream);
  return {out, lse};
}

STABLE_TORCH_LIBRARY_FRAGMENT(vllm_backport, m) {
  m.def(
      "sparse_mla_decode_fp8(Tensor q, Tensor cache, Tensor indices, Tensor lengths, Tensor extra_cache, "
      "Tensor extra_indices, Tensor extra_lengths, Tensor sink, int has_sink, Tensor(a!) out, int splits, "
      "int extra_width, float scale_log2, int stream) -> Tensor");
  m.def(
      "sparse_mla_decode_fp8_alloc(Tensor q, Tensor cache, Tensor indices, Tensor lengths, Tensor extra_cache, "
      "Tensor extra_indices, Tensor extra_lengths, Tensor sink, int has_sink, int splits, int extra_width, "
      "float scale_log2, int stream) -> (Tensor, Tensor)");
}

STABLE_TORCH_LIBRARY_IMPL(vllm_backport, CUDA, m) {
  m.impl("sparse_mla_decode_fp8", TORCH_BOX(&sparse_mla_decode_fp8));
  m.impl("sparse_mla_decode_fp8_alloc", TORCH_BOX(&sparse_mla_decode_fp8_alloc));
}
