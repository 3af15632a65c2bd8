// Sparse MLA decode on the fp8_ds_mla cache (CUDA, sm80/86/89): the launch arguments shared by
// the device file and the torch op (no torch, no CUDA types).
#pragma once
#include <cstdint>

// One fp8_ds_mla cache with one query token's slot list per row of `indices`.
struct VbkSlotList {
  const uint8_t* cache;     // pages of page_stride bytes: block_size 576-byte rows, then 8-byte scale rows
  int64_t page_stride;
  int64_t block_size;
  int32_t block_shift;      // log2(block_size) when it is a power of two, else -1
  const int32_t* indices;   // [b, s_q, width] slots (page * block_size + offset), -1 = none
  int64_t stride_b, stride_s;
  int64_t width;
  const int32_t* lengths;   // [b]: the first lengths[b] slots of each row count
};

struct VbkSparseDecodeArgs {
  const void* q;            // bf16 [b, s_q, heads, 512], 16-byte aligned rows
  int64_t q_stride_b, q_stride_s, q_stride_h;
  int64_t batch, s_q, heads;
  VbkSlotList main, extra;  // extra.width == 0: no second cache
  int64_t splits;           // 1: out and lse are written; 2, 3, 4, 8 or 16: part_o and part_lse, then merged
  void* out;                // bf16 [b, s_q, heads, 512] (any strides, 16-byte aligned rows)
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;               // float32 [b, heads, s_q], natural log, +inf where no token
  int64_t lse_stride_b, lse_stride_h, lse_stride_s;
  const float* sink;        // float32 [heads] or nullptr: out *= exp(lse) / (exp(lse) + exp(sink))
  float* part_o;            // float32 [b * s_q, splits, heads, 512]: each split's normalised output
  float* part_lse;          // float32 [b * s_q, splits, heads]: its base-2 log-sum-exp, -inf if empty
  float scale_log2;         // softmax scale * log2(e)
  int32_t merge_in_kernel;  // set by the launch: the blocks merge the splits themselves (cooperative launch)
};

// Launches on stream; returns nullptr or the error text.
const char* vbk_sparse_mla_decode_cuda(const VbkSparseDecodeArgs* args, void* stream);
