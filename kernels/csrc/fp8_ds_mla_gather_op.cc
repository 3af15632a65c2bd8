// vllm_backport::fp8_ds_mla_slot_gather and fp8_ds_mla_paged_gather: the torch ops over the CUDA
// gathers of fp8_ds_mla_gather_kernel.cu. The Python callers (vllm_backport/kernels/
// fp8_ds_mla_ops.py, cache_gather_ops.py) check the user-facing contract and name the fix; the
// checks here guard everything the kernels touch. Both write into out and return nothing.

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "fp8_ds_mla_gather.h"
#include "op_checks.h"

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

static bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

static VbkCachePages cache_pages(const Tensor& cache, int64_t block_size, const char* op) {
  STD_TORCH_CHECK(cache.is_cuda() && cache.scalar_type() == ScalarType::Byte && cache.dim() == 2 &&
                      cache.stride(1) == 1 && aligned16(cache) && cache.stride(0) % 16 == 0,
                  op, ": cache must be CUDA uint8 [pages, page_bytes] with 16-byte aligned pages");
  STD_TORCH_CHECK(block_size >= 1 && cache.sizes()[1] >= block_size * (576 + 8), op,
                  ": pages of block_size ", block_size, " need ", block_size * (576 + 8), " bytes, the cache has ",
                  cache.sizes()[1]);
  int shift = 0;
  while ((int64_t{1} << shift) < block_size) ++shift;
  return VbkCachePages{static_cast<const uint8_t*>(cache.data_ptr()), cache.stride(0), block_size,
                       (int64_t{1} << shift) == block_size ? shift : -1};
}

static void check_out_rows(const Tensor& out, const Tensor& cache, const char* op) {
  check_on_device_of(out, cache, op, "out", "cache");
  STD_TORCH_CHECK(out.scalar_type() == ScalarType::BFloat16 && out.sizes()[out.dim() - 1] == 512 &&
                      out.stride(out.dim() - 1) == 1 && aligned16(out),
                  op, ": out must be bf16 [..., 512], last dim contiguous, 16-byte aligned");
}

static void fp8_ds_mla_slot_gather(Tensor cache, Tensor indices, int64_t block_size, Tensor out, int64_t stream) {
  const char* op = "fp8_ds_mla_slot_gather";
  VbkSlotGatherArgs a;
  a.pages = cache_pages(cache, block_size, op);
  check_on_device_of(indices, cache, op, "indices", "cache");
  STD_TORCH_CHECK((indices.scalar_type() == ScalarType::Int || indices.scalar_type() == ScalarType::Long) &&
                      indices.dim() == 1 && indices.stride(0) == 1,
                  op, ": indices must be contiguous int32 or int64 [n]");
  check_out_rows(out, cache, op);
  STD_TORCH_CHECK(out.dim() == 2 && out.sizes()[0] == indices.sizes()[0] && out.stride(0) == 512, op,
                  ": out must be contiguous bf16 [n, 512] for n indices");
  a.indices = indices.data_ptr();
  a.indices64 = indices.scalar_type() == ScalarType::Long;
  a.n = indices.sizes()[0];
  a.out = out.data_ptr();
  if (a.n == 0) return;
  const char* err = vbk_fp8_ds_mla_slot_gather_cuda(&a, reinterpret_cast<void*>(stream));
  STD_TORCH_CHECK(err == nullptr, op, " launch failed: ", err);
}

static void check_int32_rows(const Tensor& t, const Tensor& cache, const char* op, const char* name, int64_t dim) {
  check_on_device_of(t, cache, op, name, "cache");
  STD_TORCH_CHECK(t.scalar_type() == ScalarType::Int && t.dim() == dim && t.stride(dim - 1) == 1, op, ": ", name,
                  " must be int32 with a contiguous last dim");
}

static void fp8_ds_mla_paged_gather(Tensor out, Tensor cache, Tensor seq_lens, Tensor gather_lens,
                                    int64_t has_gather_lens, Tensor block_table, int64_t block_size, int64_t offset,
                                    int64_t stream) {
  const char* op = "fp8_ds_mla_paged_gather";
  VbkPagedGatherArgs a;
  a.pages = cache_pages(cache, block_size, op);
  check_out_rows(out, cache, op);
  STD_TORCH_CHECK(out.dim() == 3 && out.stride(0) % 8 == 0 && out.stride(1) % 8 == 0, op,
                  ": out must be [reqs, rows, 512] with 16-byte aligned rows");
  check_int32_rows(seq_lens, cache, op, "seq_lens", 1);
  check_int32_rows(block_table, cache, op, "block_table", 2);
  a.reqs = seq_lens.sizes()[0];
  if (has_gather_lens) {
    check_int32_rows(gather_lens, cache, op, "gather_lens", 1);
    STD_TORCH_CHECK(gather_lens.sizes()[0] >= a.reqs, op, ": gather_lens needs a value per request");
  }
  STD_TORCH_CHECK(block_table.sizes()[0] >= a.reqs && out.sizes()[0] >= a.reqs, op,
                  ": block_table and out need a row per request (", a.reqs, ")");
  STD_TORCH_CHECK(a.reqs < 65536, op, ": at most 65535 requests per call, got ", a.reqs);
  STD_TORCH_CHECK(offset >= 0 && offset <= out.sizes()[1], op, ": offset ", offset, " outside out's ",
                  out.sizes()[1], " rows");
  a.seq_lens = static_cast<const int32_t*>(seq_lens.data_ptr());
  a.gather_lens = has_gather_lens ? static_cast<const int32_t*>(gather_lens.data_ptr()) : nullptr;
  a.block_table = static_cast<const int32_t*>(block_table.data_ptr());
  a.bt_stride = block_table.stride(0);
  a.rows = out.sizes()[1] - offset;
  a.out = out.data_ptr();
  a.out_stride_b = out.stride(0);
  a.out_stride_row = out.stride(1);
  a.offset = offset;
  if (a.reqs == 0 || a.rows == 0) return;
  const char* err = vbk_fp8_ds_mla_paged_gather_cuda(&a, reinterpret_cast<void*>(stream));
  STD_TORCH_CHECK(err == nullptr, op, " launch failed: ", err);
}

STABLE_TORCH_LIBRARY_FRAGMENT(vllm_backport, m) {
  m.def("fp8_ds_mla_slot_gather(Tensor cache, Tensor indices, int block_size, Tensor(a!) out, int stream) -> ()");
  m.def(
      "fp8_ds_mla_paged_gather(Tensor(a!) out, Tensor cache, Tensor seq_lens, Tensor gather_lens, "
      "int has_gather_lens, Tensor block_table, int block_size, int offset, int stream) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(vllm_backport, CUDA, m) {
  m.impl("fp8_ds_mla_slot_gather", TORCH_BOX(&fp8_ds_mla_slot_gather));
  m.impl("fp8_ds_mla_paged_gather", TORCH_BOX(&fp8_ds_mla_paged_gather));
}
