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
  int64_t splits;           // 1: out and lse are written; 2, 4, 8 or 16: part_o and part_lse, then merged
  void* out;                // bf16 [b, s_q, heads, 512] (any strides, 4-byte aligned rows)
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;               // float32 [b, heads, s_q], natural log, +inf where no token
  int64_t lse_stride_b, lse_stride_h, lse_stride_s;
  const float* sink;        // float32 [heads] or nullptr: out *= exp(lse) / (exp(lse) + exp(sink))
  float* part_o;            // float32 [b * s_q, splits, heads, 512]: each split's normalised output
  float* part_lse;          // float32 [b * s_q, splits, heads]: its base-2 log-sum-exp, -inf if empty
  int32_t* tickets;         // [b * s_q, head blocks], zeroed: the split blocks of a row count themselves
                            // done and the last merges; nullptr: split_merge_kernel merges after
  float scale_log2;         // softmax scale * log2(e)
};

constexpr int64_t kVbkDecodeBlockHeads = 64;  // query heads per block of the decode kernel

// Split counts up to this merge in the decode kernel (tickets given); more use split_merge_kernel.
// Two: the last block's sum of two rounded products is the same whichever finished last (with
// more, the order of the sum would change the bits from run to run), and it reads one other
// partial of 128 KB, which a single SM does fast.
constexpr int64_t kVbkInKernelMergeMaxSplits = 2;

// Launches on stream (zeroing tickets first when given); returns nullptr or the error text.
const char* vbk_sparse_mla_decode_cuda(const VbkSparseDecodeArgs* args, void* stream);
