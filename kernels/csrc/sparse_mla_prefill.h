// Sparse MLA prefill on gathered bf16 KV (CUDA, sm80/86/89): the launch arguments shared by the
// device file and the torch op (no torch, no CUDA types).
#pragma once
#include <cstdint>

struct VbkSparsePrefillArgs {
  const void* q;            // bf16 [s_q, heads, 512], 16-byte aligned rows
  int64_t q_stride_t, q_stride_h;
  int64_t s_q, heads;
  const void* kv;           // bf16 rows of 512, kv_stride elements apart (16-byte aligned)
  int64_t kv_stride, s_kv;
  const int32_t* indices;   // [s_q, topk] rows of kv, idx_stride apart; < 0 or >= s_kv: no token
  int64_t idx_stride, topk;
  const int32_t* lengths;   // [s_q]: the first lengths[t] indices count; nullptr: all topk
  const float* sink;        // float32 [heads] or nullptr: out *= exp(lse) / (exp(lse) + exp(sink))
  void* out;                // bf16 [s_q, heads, 512] (4-byte aligned rows)
  int64_t out_stride_t, out_stride_h;
  float* max_logits;        // float32 [s_q, heads], contiguous: natural-log max score, -inf if none
  float* lse;               // float32 [s_q, heads], contiguous: natural log, +inf if none
  float scale_log2;         // softmax scale * log2(e)
};

// Launches on stream; returns nullptr or the error text.
const char* vbk_sparse_mla_prefill_cuda(const VbkSparsePrefillArgs* args, void* stream);
