// fp8_ds_mla gathers for sm80/86/89: cache rows (576 data + 8 scale bytes) -> bf16 rows of 512,
// by slot list (vllm_backport::fp8_ds_mla_slot_gather) or by block table (the prefill's
// dequantize_and_gather_k_cache: vllm_backport::fp8_ds_mla_paged_gather).
//
// One warp per row, so every access is a 16-byte vector: lanes 0-27 take one code chunk each (16
// e4m3 codes, dequantised in packed bf16 by fp8_ds_mla_dequant.cuh into 32 bytes of output) and
// lanes 28-31 two RoPE chunks each. A warp loads all its kRowsPerWarp rows before it decodes any, so more
// bytes are in flight per warp: at small gathers the kernel is one or two DRAM round trips long.
// No anonymous namespace (see e4m3_decode_kernel.cu: it would make the .so differ per build).

#include <cuda_bf16.h>

#include <cstdint>

#include "fp8_ds_mla_dequant.cuh"
#include "fp8_ds_mla_gather.h"

namespace vbk_sparse_mla {

constexpr int kGatherWarps = 8;   // warps per block
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kGatherWarps * kRowsPerWarp;
constexpr int kCodeLanes = 448 / 16;  // lanes with a code chunk; the other 4 copy RoPE
constexpr int kOutChunks = 512 * 2 / 16;

// slot / block_size (slot >= 0): a shift for power-of-two block sizes (the usual case), else a division.
__device__ __forceinline__ int64_t page_of(const VbkCachePages& p, int64_t slot) {
  return p.block_shift >= 0 ? slot >> p.block_shift : slot / p.block_size;
}

// One lane's share of one cache row: a code chunk and its group's scale byte (lanes 0-27), or RoPE
// chunks 28 + q and 32 + q (lane 28 + q). A row that holds no token reads as zeros with scale 2^0.
struct LaneShare {
  uint4 a, b;
  uint32_t scale;
};

__device__ __forceinline__ LaneShare load_share(const VbkCachePages& p, int64_t page_no, int64_t off, bool valid,
                                                int lane) {
  LaneShare s{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 127u};
  if (!valid) return s;
  const uint8_t* page = p.cache + page_no * p.page_stride;
  const uint4* data = reinterpret_cast<const uint4*>(page + off * 576);
  if (lane < kCodeLanes) {
    s.a = __ldcs(data + lane);  // each cache row is read once: evict-first
    s.scale = __ldcs(page + p.block_size * 576 + off * 8 + lane / 4);
  } else {
    s.a = __ldcs(data + lane);
    s.b = __ldcs(data + lane + 4);
  }
  return s;
}

// Code chunk j becomes output chunks 2j and 2j + 1; RoPE chunk 28 + k output chunk 56 + k.
__device__ __forceinline__ void store_share(const LaneShare& s, uint4* out_row, int lane) {
  if (lane < kCodeLanes) {
    uint4 lo, hi;
    dequantise_chunk_exact(s.a, s.scale, lo, hi);
    out_row[2 * lane] = lo;
    out_row[2 * lane + 1] = hi;
  } else {
    out_row[2 * kCodeLanes + lane - kCodeLanes] = s.a;
    out_row[2 * kCodeLanes + lane - kCodeLanes + 4] = s.b;
  }
}

template <typename Index>
__global__ void __launch_bounds__(kGatherWarps * 32) slot_gather_kernel(const VbkSlotGatherArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGatherWarps + (threadIdx.x >> 5)) * kRowsPerWarp;
  const Index* indices = static_cast<const Index*>(a.indices);
  LaneShare s[kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t slot = row0 + k < a.n ? static_cast<int64_t>(indices[row0 + k]) : -1;
    const int64_t page_no = page_of(a.pages, slot);
    s[k] = load_share(a.pages, page_no, slot - page_no * a.pages.block_size, slot >= 0, lane);
  }
  uint4* out = static_cast<uint4*>(a.out);
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k)
    if (row0 + k < a.n) store_share(s[k], out + (row0 + k) * kOutChunks, lane);
}

// Block (x, b): rows [kRowsPerBlock x, +kRowsPerBlock) of request b's gathered rows, the
// positions start + i of its last n tokens (start = seq_len - n). (Loading a row's page-table
// entry alongside seq_lens when start is 0 was measured 3% slower at 256K rows and no faster at
// 4K, on an H200 from sm8x PTX.)
__global__ void __launch_bounds__(kGatherWarps * 32) paged_gather_kernel(const VbkPagedGatherArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t b = blockIdx.y;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGatherWarps + (threadIdx.x >> 5)) * kRowsPerWarp;
  const int64_t seq_len = a.seq_lens[b];
  const int64_t n = a.gather_lens ? static_cast<int64_t>(a.gather_lens[b]) : seq_len;
  const int64_t rows = min(n, a.rows);  // rows past out's end are not written
  if (row0 >= rows) return;
  const int32_t* pages_of_b = a.block_table + b * a.bt_stride;
  LaneShare s[kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t pos = seq_len - n + row0 + k;  // a gather longer than the sequence reads zeros before it
    const bool valid = row0 + k < rows && pos >= 0;
    const int64_t page_index = valid ? page_of(a.pages, pos) : 0;
    const int64_t page_no = valid ? pages_of_b[page_index] : 0;
    s[k] = load_share(a.pages, page_no, pos - page_index * a.pages.block_size, valid, lane);
  }
  uint4* out = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.out) + b * a.out_stride_b);
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k)
    if (row0 + k < rows) store_share(s[k], out + (a.offset + row0 + k) * a.out_stride_row / 8, lane);
}

}  // namespace vbk_sparse_mla

using namespace vbk_sparse_mla;

static const char* launched() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

const char* vbk_fp8_ds_mla_slot_gather_cuda(const VbkSlotGatherArgs* args, void* stream) {
  const int64_t blocks = (args->n + kRowsPerBlock - 1) / kRowsPerBlock;
  auto s = static_cast<cudaStream_t>(stream);
  if (args->indices64)
    slot_gather_kernel<int64_t><<<static_cast<unsigned>(blocks), kGatherWarps * 32, 0, s>>>(*args);
  else
    slot_gather_kernel<int32_t><<<static_cast<unsigned>(blocks), kGatherWarps * 32, 0, s>>>(*args);
  return launched();
}

const char* vbk_fp8_ds_mla_paged_gather_cuda(const VbkPagedGatherArgs* args, void* stream) {
  const dim3 grid(static_cast<unsigned>((args->rows + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(args->reqs));
  paged_gather_kernel<<<grid, kGatherWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(*args);
  return launched();
}
