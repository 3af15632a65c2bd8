// DeepSeek-V4 sparse MLA prefill (FlashMLA's flash_mla_sparse_fwd) on gathered bf16 KV, for
// sm80/86/89: the decode kernel's products and softmax (sparse_mla_tile.cuh) without its
// dequantisation. One block per SM and 64 query heads, looping over query tokens; a token's listed
// rows go in tiles of 32, copied by cp.async straight into the swizzled K/V tiles.
//
// Both products read only their warp group's half of a row (warps 0-3 dims 0-255, warps 4-7
// dims 256-511), so each group copies its own half of every row and syncs on its own named
// barrier: at the top of tile i a group waits for its copies of tile i, and, once all its warps
// are past tile i - 1's products, starts copying tile i + 1 into the buffer those read. A row's
// copies thus have a whole tile's products to land, with two 32 KB buffers (sm86/89's 99 KB per
// block holds no third). Rows that hold no token are zero-filled by the copy itself.
// No anonymous namespace (see e4m3_decode_kernel.cu: it would make the .so differ per build).

#include <cuda_bf16.h>

#include <cstdint>

#include "sparse_mla_prefill.h"
#include "sparse_mla_tile.cuh"

namespace vbk_sparse_mla {

constexpr int kGroupThreads = kThreads / 2;              // one warp group: the threads of one half
constexpr int kCopyThreads = kGroupThreads / kTile;      // per row and half
constexpr int kCopies = kChunks / 2 / kCopyThreads;      // 16-byte copies per thread and tile

struct PrefillSmem {
  uint4 kv[2][kTile * kChunks];  // bf16 K/V tiles, swizzled (32 KB each)
  TileShared ts;
  float seen_max[kHeads];        // each head's true maximum score (base 2), for max_logits
  int kv_valid[2][kTile];        // does a tile row hold a token
};

static_assert(sizeof(PrefillSmem) <= 99 * 1024, "sparse MLA prefill: shared memory over sm86/sm89's 99 KB per block");
static_assert(sizeof(PrefillSmem) == 80128, "update PREFILL_KERNEL in tools/bench/card_projection.py");

// The kv row at list position pos of this token (-1 past its length).
__device__ __forceinline__ int32_t listed_row(const int32_t* list, int pos, int n) { return pos < n ? list[pos] : -1; }

// Starts copying half `group` of kv row `row` (any int32: out of range = no token) into row
// `r` of tile buffer `buf`: this thread's kCopies chunks, 4 threads reading 64 contiguous bytes.
__device__ __forceinline__ void copy_half_row(const VbkSparsePrefillArgs& a, PrefillSmem& sm, int buf, int32_t row,
                                              int group, int r, int c) {
  const bool ok = row >= 0 && row < a.s_kv;
  if (group == 0 && c == 0) sm.kv_valid[buf][r] = ok;
  const uint4* src = static_cast<const uint4*>(a.kv) + (ok ? row : 0) * (a.kv_stride / 8) + 32 * group;
#pragma unroll
  for (int k = 0; k < kCopies; ++k) {
    const int chunk = kCopyThreads * k + c;
    cp_async16_or_zero(&sm.kv[buf][swz(r, 32 * group + chunk)], src + chunk, ok);
  }
  cp_async_commit();
}

// Barrier of one warp group (ids 1 and 2; 0 is __syncthreads').
__device__ __forceinline__ void group_barrier(int group) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "r"(kGroupThreads) : "memory");
}

// Listed rows of query token `token` (its topk_length, clamped; none when kv is empty).
__device__ __forceinline__ int listed_count(const VbkSparsePrefillArgs& a, int64_t token) {
  const int n = a.s_kv > 0 ? static_cast<int>(a.topk) : 0;
  return a.lengths != nullptr ? min(max(a.lengths[token], 0), n) : n;
}

// Pulls this block's query rows of `token` (two 128-byte lines per thread) and its list of rows
// into L2, so the next token's first loads wait for L2, not DRAM.
__device__ __forceinline__ void prefetch_token(const VbkSparsePrefillArgs& a, int64_t token, int head0, int tid) {
  const int head = head0 + (tid >> 2);
  if (head < a.heads) {
    const char* row = static_cast<const char*>(a.q) + 2 * (token * a.q_stride_t + head * a.q_stride_h);
    const int line = 2 * (tid & 3);
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + 128 * line));
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + 128 * (line + 1)));
  }
  if (32 * tid < a.topk) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.indices + token * a.idx_stride + 32 * tid));
}

// Persistent: block (x, y) takes query tokens x, x + gridDim.x, ... for heads [64 y, 64 y + 64),
// one SM each, and pulls its next token's queries and list into L2 while the current one runs.
// (Copying the next token's first rows during the current token's last tile was tried: the
// registers it holds through the loop made the kernel spill and run 20% slower on the H200.)
__global__ void __launch_bounds__(kThreads, 1) sparse_prefill_kernel(const VbkSparsePrefillArgs a) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  PrefillSmem& sm = *reinterpret_cast<PrefillSmem*>(smem_bytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int group = warp >> 2, mi = warp & 3;  // dims half; head group of the S product
  const int copy_row = (tid % kGroupThreads) / kCopyThreads, copy_lane = tid % kCopyThreads;
  const int head0 = blockIdx.y * kHeads;
  const int r0 = mi * 16 + g, r1 = r0 + 8;
  const LaneAddrs la = lane_addrs(smem_u32(sm.kv[0]), sm.ts, warp, lane);
  const uint32_t kv_bytes = sizeof(sm.kv[0]);

  int64_t token = blockIdx.x;
  int n = listed_count(a, token);
  const int32_t* list = a.indices + token * a.idx_stride;
  int buf = 0;
  while (true) {
    if (n > 0) copy_half_row(a, sm, buf, listed_row(list, copy_row, n), group, copy_row, copy_lane);
    int32_t next_row = listed_row(list, kTile + copy_row, n);
    // The next token's queries and list into L2 while this one runs.
    const int64_t next_token = token + gridDim.x;
    const bool more = next_token < a.s_q;
    if (more) prefetch_token(a, next_token, head0, tid);

    uint32_t qf[16][4];
    {
      const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(a.q) + token * a.q_stride_t + 256 * group + 2 * t;
      load_queries(qf, q + (head0 + r0) * a.q_stride_h, q + (head0 + r1) * a.q_stride_h, head0 + r0 < a.heads,
                   head0 + r1 < a.heads);
    }
    float m_run[2] = {-1.0e30f, -1.0e30f}, l_run[2] = {0.0f, 0.0f}, seen[2] = {-INFINITY, -INFINITY};
    float o[4][8][4];
    zero_output(o);

    for (int start = 0; start < n; start += kTile, buf ^= 1) {
      // This group's half of tile i has landed, and its warps are past tile i - 1's products.
      cp_async_wait_all();
      group_barrier(group);
      if (start + kTile < n) {
        copy_half_row(a, sm, buf ^ 1, next_row, group, copy_row, copy_lane);
        next_row = listed_row(list, start + 2 * kTile + copy_row, n);
      }
      float acc[4][4];
      score_tile(acc, qf, la, buf * kv_bytes);
      if (group == 1) hand_over_scores(sm.ts, acc, mi, lane);
      __syncthreads();

      float al[2] = {1.0f, 1.0f};
      if (group == 0) {
        float tile_max[2];
        // exp2f, not the decode's ex2.ftz: with it this kernel ran 7-8% slower on an H200.
        online_softmax<false>(sm.ts, acc, sm.kv_valid[buf], a.scale_log2, m_run, l_run, al, tile_max, mi, lane);
        seen[0] = fmaxf(seen[0], tile_max[0]);
        seen[1] = fmaxf(seen[1], tile_max[1]);
      }
      const bool rescale = __syncthreads_or(al[0] != 1.0f || al[1] != 1.0f);
      accumulate_pv(o, sm.ts, rescale, la, buf * kv_bytes, g);
      // No block barrier here: S halves, P and alpha are next written after the next step's
      // __syncthreads, which every warp reaches only once its products here are done.
    }

    if (group == 0) {
      publish_row_stats(sm.ts, m_run, l_run, mi, lane);
      if (t == 0) {
        sm.seen_max[r0] = seen[0];
        sm.seen_max[r1] = seen[1];
      }
    }
    __syncthreads();

    // Per head: the output factor (1 / sum and the sink's share), lse and max_logits; a head that
    // saw no token gets 0, +inf and -inf whatever its sink.
    if (tid < kHeads) {
      const float sum = sm.ts.row_sum[tid];
      const float lse2 = sm.ts.row_max[tid] + log2f(sum);
      float factor = sum > 0.0f ? 1.0f / sum : 0.0f;
      if (head0 + tid < a.heads) {
        if (a.sink != nullptr && sum > 0.0f) factor /= 1.0f + exp2f(a.sink[head0 + tid] * 1.4426950408889634f - lse2);
        const int64_t at = token * a.heads + head0 + tid;
        a.lse[at] = sum > 0.0f ? lse2 * 0.6931471805599453f : INFINITY;
        a.max_logits[at] = sum > 0.0f ? sm.seen_max[tid] * 0.6931471805599453f : -INFINITY;
      }
      sm.ts.alpha[tid] = factor;
    }
    __syncthreads();

    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + token * a.out_stride_t + head0 * a.out_stride_h;
    store_output_bf16(o, sm.ts, static_cast<int>(a.heads - head0), warp, lane,
                      [&](int r) { return out + r * a.out_stride_h; });
    if (!more) break;
    // The next token's softmax state and factors go to shared memory only after its first
    // __syncthreads, which every thread reaches after the stores above.
    token = next_token;
    n = listed_count(a, token);
    list = a.indices + token * a.idx_stride;
  }
}

}  // namespace vbk_sparse_mla

const char* vbk_sparse_mla_prefill_cuda(const VbkSparsePrefillArgs* args, void* stream) {
  using namespace vbk_sparse_mla;
  static bool opted_in[64] = {};
  if (const char* err = allow_shared_memory(sparse_prefill_kernel, sizeof(PrefillSmem), opted_in)) return err;
  // One block per SM (255 registers, one block's shared memory), each looping over its tokens.
  int device = 0, sms = 0;
  cudaError_t err = current_device_sms(device, sms);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const unsigned head_blocks = static_cast<unsigned>((args->heads + kHeads - 1) / kHeads);
  const dim3 grid(persistent_blocks(args->s_q, sms, head_blocks), head_blocks);
  sparse_prefill_kernel<<<grid, kThreads, sizeof(PrefillSmem), static_cast<cudaStream_t>(stream)>>>(*args);
  err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
