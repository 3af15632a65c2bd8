// fp8_ds_mla gathers (CUDA, sm80/86/89): the launch arguments shared by the device file and the
// torch op (no torch, no CUDA types). Both write bf16 rows of 512 (448 dequantised NoPE values,
// then the 64 RoPE values as stored) from the paged cache; see engine/vllm_backport/kernels/
// triton/fp8_ds_mla.py for the page layout.
#pragma once
#include <cstdint>

struct VbkCachePages {
  const uint8_t* cache;  // pages of page_stride bytes, 16-byte aligned
  int64_t page_stride;   // a multiple of 16
  int64_t block_size;    // tokens per page
  int block_shift;       // log2(block_size) when a power of two, else -1
};

// Row i of out = the cache row of slot indices[i] (page * block_size + offset); a negative slot
// gives a zero row.
struct VbkSlotGatherArgs {
  VbkCachePages pages;
  const void* indices;  // int32 or int64 [n]
  bool indices64;
  int64_t n;
  void* out;            // bf16 [n, 512], contiguous, 16-byte aligned
};

// For request b: its last gather_lens[b] tokens (all seq_lens[b] without gather_lens) go to out
// rows offset .. offset + gather_len - 1 of request b (upstream's dequantize_and_gather_k_cache);
// rows past out's end (offset + rows) are not written.
struct VbkPagedGatherArgs {
  VbkCachePages pages;
  const int32_t* seq_lens;     // [reqs]
  const int32_t* gather_lens;  // [reqs] or nullptr
  const int32_t* block_table;  // [reqs, bt_stride]: the request's pages in order
  int64_t bt_stride;
  int64_t reqs;
  int64_t rows;                // out rows per request past offset: the grid covers this many
  void* out;                   // bf16 [reqs, offset + rows, 512], 16-byte aligned rows
  int64_t out_stride_b, out_stride_row;  // in bf16 elements
  int64_t offset;
};

// Launch on stream; return nullptr or the CUDA error text.
const char* vbk_fp8_ds_mla_slot_gather_cuda(const VbkSlotGatherArgs* args, void* stream);
const char* vbk_fp8_ds_mla_paged_gather_cuda(const VbkPagedGatherArgs* args, void* stream);
