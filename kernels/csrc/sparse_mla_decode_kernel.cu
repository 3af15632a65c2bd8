// DeepSeek-V4 sparse MLA decode on the fp8_ds_mla cache, for sm80/86/89 (mma.sync, ldmatrix,
// cp.async; no Hopper instructions).
//
// One block = one query token x 64 query heads x one share ("split") of the token's slot list
// (its main slots, then its extra slots); the products and the softmax are the shared steps of
// sparse_mla_tile.cuh, queries in registers for the whole kernel. Per tile of 32 listed slots:
//   1. S = Q K^T (K by ldmatrix from the swizzled bf16 tile);
//   2. warps 0-3 run the online softmax; then all 8 warps dequantise the next tile's 32 cached
//      rows (576 data + 8 scale bytes, fetched by cp.async during this tile's predecessor;
//      e4m3 x UE8M0 -> bf16, RoPE copied) into the other K/V buffer, so each row is decoded once
//      per block, not once per head;
//   3. O += P V, while warps 4-7's copies of the tile after next are in flight.
// With one split per token a block writes the final bf16 output (attention sink applied; staged
// through the free K/V tiles for 16-byte row stores) and lse; with more, each writes its
// normalised partial output and base-2 lse, and they are merged (the sink applied then): with 4-16
// splits by the same blocks after a grid-wide barrier when the launch can be cooperative (all
// blocks fit on the card at once, as the engine's split rule makes them), else by
// split_merge_kernel, launched right after it in the same call.
// No anonymous namespace (see e4m3_decode_kernel.cu: it would make the .so differ per build).

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "fp8_ds_mla_dequant.cuh"
#include "sparse_mla_decode.h"
#include "sparse_mla_tile.cuh"

namespace vbk_sparse_mla {

constexpr int kDataBytes = 576;    // 448 e4m3 NoPE codes + 64 bf16 RoPE values
constexpr int kDataChunks = kDataBytes / 16;
constexpr int kRopeChunk = 448 / 16;
constexpr int kLoaderFirst = 128;  // warps 4-7 fetch the tiles' rows
constexpr int kRowThreads = (kThreads - kLoaderFirst) / kTile;  // loader threads per row

// The fetched cache rows of one tile, before dequantisation.
struct Staging {
  uint4 raw[kTile * kDataChunks];  // data rows
  uint2 raw_scale[kTile];          // their scale rows
  int raw_valid[kTile];            // does the row hold a token
};

struct Smem {
  uint4 kv[2][kTile * kChunks];  // dequantised K/V tiles, bf16, swizzled (32 KB each)
  Staging stage;                 // the next tile's rows
  TileShared ts;                 // S halves, P, softmax state
  int kv_valid[2][kTile];        // does the K/V tile's row hold a token
};

// sm86/sm89 give a block at most 99 KB (the SM table's smallest limit); registers allow one
// block per SM anyway.
static_assert(sizeof(Smem::kv) == kHeads * 512 * 2, "the output is staged in the two K/V tiles");
static_assert(sizeof(Staging) <= sizeof(Smem::kv[1]), "the first tile is staged in K/V tile 1");
static_assert(sizeof(Smem) <= 99 * 1024, "sparse MLA decode: shared memory over sm86/sm89's 99 KB per block");

// The slot at list position pos of this block's token (-1: none or past `end`). Each loader
// thread loads its row's slot a whole tile before fetch_row uses it: a warp stalls at the first
// use of a load, and the index lines come from DRAM.
__device__ __forceinline__ int32_t slot_at(const VbkSparseDecodeArgs& a, int64_t b, int64_t s, int pos, int end,
                                           int n_main) {
  if (pos >= end) return -1;
  return pos < n_main ? a.main.indices[b * a.main.stride_b + s * a.main.stride_s + pos]
                      : a.extra.indices[b * a.extra.stride_b + s * a.extra.stride_s + (pos - n_main)];
}

// Loader thread (row r, lane c) of a tile: warps 4-7, kRowThreads per row. Each waits for its own
// copies; a block barrier then makes them visible to the threads decoding the rows.
__device__ __forceinline__ int loader_row() { return (threadIdx.x - kLoaderFirst) / kRowThreads; }
__device__ __forceinline__ int loader_lane() { return (threadIdx.x - kLoaderFirst) % kRowThreads; }

// Starts fetching the row of list position pos (slot: its slot_at, -1 for none) into this loader
// thread's staging row and records whether it holds a token.
__device__ __forceinline__ void fetch_row(const VbkSparseDecodeArgs& a, Staging& st, int pos, int32_t slot, int n_main) {
  const int r = loader_row(), c = loader_lane();
  if (c == 0) st.raw_valid[r] = slot >= 0;
  if (slot >= 0) {
    const bool in_main = pos < n_main;
    const VbkSlotList& l = in_main ? a.main : a.extra;
    // Power-of-two block sizes (the usual case) split the slot with a shift, not a division.
    const uint32_t u = static_cast<uint32_t>(slot), bs = static_cast<uint32_t>(l.block_size);
    const uint32_t page_no = l.block_shift >= 0 ? u >> l.block_shift : u / bs;
    const uint32_t off = l.block_shift >= 0 ? u & (bs - 1) : u - page_no * bs;
    const uint8_t* page = l.cache + static_cast<int64_t>(page_no) * l.page_stride;
    const uint8_t* data = page + off * kDataBytes;
    for (int k = c; k < kDataChunks; k += kRowThreads) cp_async16(&st.raw[r * kDataChunks + k], data + 16 * k);
    if (c == 0) cp_async8(&st.raw_scale[r], page + bs * kDataBytes + off * 8);
  }
  cp_async_commit();
}

// Staging -> bf16 K/V tile `buf`, by all 256 threads, 8 per row (the loaders' copies are visible
// after a block barrier): row r = (thread % 128) / 4 gets lanes q = 0..3 from warps 4-7 and from
// warps 0-3. The code chunks are split by how busy each side is before it: warps 0-3 run the
// softmax first, so their lanes take chunks 20 + q + 4m (m = 0, 1; scale groups 5 and 6) and
// warps 4-7's lanes chunks q + 4m (m = 0..4; scale group m) and RoPE chunks q and q + 4; 4 lanes
// of a row read 64 contiguous bytes. Empty rows become zeros (their probability is 0, and 0 x
// stale bytes could be NaN). A chunk the packed path cannot take is redone in float32 after the
// others, out of the unrolled code.
constexpr int kLoaderChunks = 5;   // code chunks per lane of warps 4-7
constexpr int kSoftmaxChunks = 2;  // and per lane of warps 0-3
__device__ __forceinline__ void dequantise_tile(Smem& sm, const Staging& st, int buf) {
  static_assert(kThreads == 256 && kTile == 32 && kDataChunks == 36, "the chunk split below assumes 8 threads per row");
  static_assert(4 * (kLoaderChunks + kSoftmaxChunks) == kRopeChunk, "the lanes of a row take all 28 code chunks");
  const int r = (threadIdx.x & 127) >> 2, q = threadIdx.x & 3;
  const bool loader = threadIdx.x >= kLoaderFirst;
  const int first = loader ? 0 : 4 * kLoaderChunks;  // this lane's chunks: first + q + 4m
  const bool ok = st.raw_valid[r];
  if (loader && q == 0) sm.kv_valid[buf][r] = ok;
  const uint4* raw = &st.raw[r * kDataChunks + first + q];
  const uint2 sc = st.raw_scale[r];
  // Scale byte of group first / 4 + m: bytes 0-4 for warps 4-7, 5-6 for warps 0-3 (0x7F: 2^0 for empty rows).
  const uint64_t scales = ok ? ((static_cast<uint64_t>(sc.y) << 32 | sc.x) >> (first * 2)) : 0x7F7F7F7F7F7F7F7Full;
  // Code chunk j lands in K/V chunks 2j and 2j + 1: for j = first + q + 4m, swizzled places
  // 2 first + 8m + ((2q + h) ^ (r & 7)).
  uint4* lo = &sm.kv[buf][swz(r, 2 * q) + 2 * first];
  uint4* hi = &sm.kv[buf][swz(r, 2 * q + 1) + 2 * first];
  uint32_t redo = 0;
#pragma unroll
  for (int m = 0; m < kLoaderChunks; ++m) {
    if (m == kSoftmaxChunks && !loader) break;
    const uint4 w = ok ? raw[4 * m] : make_uint4(0, 0, 0, 0);
    const uint32_t scale = static_cast<uint32_t>(scales >> (8 * m)) & 0xFFu;
    uint4 l, h;
    if (!dequantise_chunk(w, scale, l, h)) redo |= 1u << m;
    lo[8 * m] = l;
    hi[8 * m] = h;
  }
  if (redo) {
#pragma unroll 1
    for (int m = 0; m < kLoaderChunks; ++m)
      if (redo >> m & 1)
        dequantise_chunk_float(raw[4 * m], static_cast<uint32_t>(scales >> (8 * m)) & 0xFFu, &lo[8 * m], &hi[8 * m]);
  }
  if (loader) {
    sm.kv[buf][swz(r, 56 + q)] = ok ? st.raw[r * kDataChunks + kRopeChunk + q] : make_uint4(0, 0, 0, 0);
    sm.kv[buf][swz(r, 60 + q)] = ok ? st.raw[r * kDataChunks + kRopeChunk + 4 + q] : make_uint4(0, 0, 0, 0);
  }
}

// A split's normalised fp32 partial output (rows scaled by ts.alpha) through `stage`, the two K/V
// tiles, 32 heads (64 KB) at a time, then 16-byte row stores, as store_output_bf16_rows does for
// the final bf16 output. dst(r): head r's 512 floats (the split buffers are 16-byte aligned).
// Partials stay in L2 for the merge kernel, so plain stores.
template <typename RowPtr>
__device__ __forceinline__ void store_partial_rows(const float (&o)[4][8][4], const TileShared& ts, uint4* stage,
                                                   int heads, int warp, int lane, RowPtr dst) {
  constexpr int kRowChunks = 512 * 4 / 16, kPassRows = kHeads / 2;
  const int g = lane >> 2, t = lane & 3;
  const int c = threadIdx.x % kRowChunks, r0 = threadIdx.x / kRowChunks;  // the stores' chunk and first row
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    if (pass) __syncthreads();  // the first pass's stores have read the stage
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int lr = m * 16 + g + 8 * half;  // row within this pass
        const float f = ts.alpha[pass * kPassRows + lr];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int chunk = warp * 16 + nt * 2 + (t >> 1);  // columns 64 warp + 8 nt + 2 t, 2 t + 1
          float2* p = reinterpret_cast<float2*>(&stage[lr * kRowChunks + (chunk ^ (lr & 7))]) + (t & 1);
          *p = make_float2(o[2 * pass + m][nt][2 * half] * f, o[2 * pass + m][nt][2 * half + 1] * f);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPassRows * kRowChunks / kThreads; ++i) {
      const int lr = r0 + i * (kThreads / kRowChunks), r = pass * kPassRows + lr;
      if (r < heads) reinterpret_cast<uint4*>(dst(r))[c] = stage[lr * kRowChunks + (c ^ (lr & 7))];
    }
  }
}

// blockIdx.y read afresh: the compiler would keep the first read live across the tile loop, whose
// registers are all taken on sm_80 (one spill there, with the first two tiles fetched at once).
__device__ __forceinline__ int block_y_again() {
  int y;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  return y;
}

// The merge of one (query token, head) over its splits, from their base-2 lse: out = sum_s w_s o_s
// * factor with w_s = 2^(lse_s - max lse), factor = 1 / sum_s w_s times the sink's share; a head
// that no split saw gets factor 0 and lse +inf (also when its sink is -inf).
template <int kSplits>
struct SplitWeights {
  float w[kSplits];
  float factor;
  float lse;  // natural log
};

template <int kSplits>
__device__ __forceinline__ SplitWeights<kSplits> split_weights(const float (&lse2)[kSplits], const float* sink,
                                                               int head) {
  SplitWeights<kSplits> r;
  float m = -INFINITY;
#pragma unroll
  for (int sp = 0; sp < kSplits; ++sp) m = fmaxf(m, lse2[sp]);
  const bool empty = m == -INFINITY;
  float total = 0.0f;
#pragma unroll
  for (int sp = 0; sp < kSplits; ++sp) {
    r.w[sp] = empty ? 0.0f : exp2f(lse2[sp] - m);  // an empty split: 2^-inf = 0
    total += r.w[sp];
  }
  const float lse_all = m + log2f(total);
  r.factor = empty ? 0.0f : 1.0f / total;
  if (!empty && sink != nullptr) r.factor /= 1.0f + exp2f(sink[head] * 1.4426950408889634f - lse_all);
  r.lse = empty ? INFINITY : lse_all * 0.6931471805599453f;
  return r;
}

template <int kSplits>
__device__ __forceinline__ float4 weighted_sum(const float4 (&part)[kSplits], const SplitWeights<kSplits>& sw) {
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int sp = 0; sp < kSplits; ++sp) {
    acc.x += sw.w[sp] * part[sp].x;
    acc.y += sw.w[sp] * part[sp].y;
    acc.z += sw.w[sp] * part[sp].z;
    acc.w += sw.w[sp] * part[sp].w;
  }
  return acc;
}

// The merge inside a cooperative launch, after the grid-wide barrier. Each (token, head) row is
// cut into q items of 512 / q columns (q = 1, 2 or 4: as many items as there are warps, at most),
// a warp per item, a lane 4 columns in each 128: the weights are computed once per lane and item,
// so a large merge (rows >= warps) computes them once per row (at one block per SM there are too
// few warps to hide a longer chain; measured on an H200), and a small one still spreads over every warp.
// Each pass has kRows items x kVecs of its float4 per split in flight (16 float4 at most). Blocks
// past the decode's tokens only help here (see the launch), so a small batch's merge runs on every
// SM, not only on those that decoded.
template <int kSplits>
__device__ void merge_after_barrier(const VbkSparseDecodeArgs& a) {
  constexpr int kVecs = kSplits >= 16 ? 1 : kSplits >= 8 ? 2 : 4;
  constexpr int kRows = kSplits <= 2 ? 2 : 1;
  const int heads = static_cast<int>(a.heads), s_q = static_cast<int>(a.s_q);
  const int warps = gridDim.x * gridDim.y * gridDim.z * (kThreads / 32);
  const int rows = static_cast<int>(a.batch) * s_q * heads;  // < 2^31: the grid fits the card
  const int q = warps >= 4 * rows ? 4 : warps >= 2 * rows ? 2 : 1, vecs = 4 / q, items = rows * q;
  const int lane = threadIdx.x & 31;
  const int first = ((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  for (int i0 = first; i0 < items; i0 += kRows * warps) {
    for (int dv = 0; dv < vecs; dv += kVecs) {
      float lse[kRows][kSplits];
      float4 part[kRows][kVecs][kSplits];
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        const int item = min(i0 + k * warps, items - 1);  // past the end: a valid item, not stored
        const int r = item / q, col = (item % q * vecs + dv) * 128 + lane * 4;
        const int base = r / heads * kSplits * heads + r % heads;  // (token, split 0, head)
#pragma unroll
        for (int sp = 0; sp < kSplits; ++sp) {
          lse[k][sp] = a.part_lse[base + sp * heads];
#pragma unroll
          for (int v = 0; v < kVecs; ++v)
            if (dv + v < vecs)
              part[k][v][sp] = *reinterpret_cast<const float4*>(a.part_o + int64_t(base + sp * heads) * 512 + col + v * 128);
        }
      }
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        const int item = i0 + k * warps;
        if (item >= items) break;
        const int r = item / q, head = r % heads, token = r / heads, b = token / s_q, s = token % s_q;
        const int col = (item % q * vecs + dv) * 128 + lane * 4;
        const SplitWeights<kSplits> sw = split_weights<kSplits>(lse[k], a.sink, head);
        __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + b * a.out_stride_b + s * a.out_stride_s +
                             head * a.out_stride_h + col;
#pragma unroll
        for (int v = 0; v < kVecs; ++v) {
          if (dv + v >= vecs) break;
          const float4 acc = weighted_sum<kSplits>(part[k][v], sw);
          *reinterpret_cast<uint2*>(out + v * 128) =
              make_uint2(bf16x2(acc.x * sw.factor, acc.y * sw.factor), bf16x2(acc.z * sw.factor, acc.w * sw.factor));
        }
        if (col == 0) a.lse[b * a.lse_stride_b + head * a.lse_stride_h + s * a.lse_stride_s] = sw.lse;
      }
    }
  }
}

// After the grid-wide barrier: the merge of a.splits partials (2, 3, 4, 8 or 16).
__device__ __forceinline__ void merge_splits_after_barrier(const VbkSparseDecodeArgs& a) {
  cooperative_groups::this_grid().sync();  // every block's partials written and visible
  switch (a.splits) {
    case 2: merge_after_barrier<2>(a); break;
    case 3: merge_after_barrier<3>(a); break;
    case 4: merge_after_barrier<4>(a); break;
    case 8: merge_after_barrier<8>(a); break;
    case 16: merge_after_barrier<16>(a); break;
  }
}

__global__ void __launch_bounds__(kThreads, 1) sparse_decode_kernel(const VbkSparseDecodeArgs a) {
  if (blockIdx.x >= a.batch * a.s_q) {  // a helper block of the in-kernel merge: no token to decode
    merge_splits_after_barrier(a);
    return;
  }
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_bytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t token = blockIdx.x, b = token / a.s_q, s = token % a.s_q;
  const int split = blockIdx.z;

  // This split's share of the list [main slots | extra slots], in whole tiles.
  const int n_main = min(max(a.main.lengths[b], 0), static_cast<int>(a.main.width));
  const int n_extra = a.extra.width > 0 ? min(max(a.extra.lengths[b], 0), static_cast<int>(a.extra.width)) : 0;
  const int n = n_main + n_extra;
  const int per = ((n + kTile - 1) / kTile + a.splits - 1) / a.splits * kTile;
  const int begin = split * per, end = min(begin + per, n);

  // The loaders put the first two tiles' rows in flight at once, the first staged in K/V tile 1
  // (free until tile 1 is dequantised), so the block's start waits one DRAM round trip for rows,
  // not two in turn; each step then fetches the tile after next.
  const bool loader = tid >= kLoaderFirst;
  const int my_row = loader ? loader_row() : 0;
  Staging& first_stage = *reinterpret_cast<Staging*>(sm.kv[1]);
  int32_t next_slot = -1;
  if (loader) {
    const int32_t slot0 = slot_at(a, b, s, begin + my_row, end, n_main);
    const int32_t slot1 = slot_at(a, b, s, begin + kTile + my_row, end, n_main);
    fetch_row(a, first_stage, begin + my_row, slot0, n_main);
    fetch_row(a, sm.stage, begin + kTile + my_row, slot1, n_main);  // an empty group past `end`
    next_slot = slot_at(a, b, s, begin + 2 * kTile + my_row, end, n_main);
  }

  // S-phase role: heads [16 mi, 16 mi + 16) x dims [256 kh, 256 kh + 256); this lane's rows.
  const int mi = warp & 3, kh = warp >> 2;
  const int r0 = mi * 16 + g, r1 = r0 + 8;
  uint32_t qf[16][4];
  {
    const int head0 = blockIdx.y * kHeads;
    const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(a.q) + b * a.q_stride_b + s * a.q_stride_s +
                             256 * kh + 2 * t;
    load_queries(qf, q + (head0 + r0) * a.q_stride_h, q + (head0 + r1) * a.q_stride_h, head0 + r0 < a.heads,
                 head0 + r1 < a.heads);
  }
  float m_run[2] = {-1.0e30f, -1.0e30f}, l_run[2] = {0.0f, 0.0f};
  float o[4][8][4];
  zero_output(o);
  const LaneAddrs la = lane_addrs(smem_u32(sm.kv[0]), sm.ts, warp, lane);
  const uint32_t kv_bytes = sizeof(sm.kv[0]);

  // Software pipeline: tile i's products run on K/V buffer i % 2. Between its two products every
  // warp dequantises tile i + 1 into the other buffer (warps 0-3 after their softmax; its rows
  // were fetched during tile i - 1's products and waited for before tile i's first barrier), and
  // after that the loaders (warps 4-7) start fetching tile i + 2 into the freed staging rows.
  if (loader) cp_async_wait_group<1>();  // tile 0's rows; tile 1's may still be in flight
  __syncthreads();
  if (begin < end) dequantise_tile(sm, first_stage, 0);
  __syncthreads();  // K/V tile 1 is free again for tile 1's rows
  int buf = 0;
  for (int start = begin; start < end; start += kTile, buf ^= 1) {
    const uint32_t kv_off = buf * kv_bytes;
    float acc[4][4];
    score_tile(acc, qf, la, kv_off);
    if (kh == 1) {
      hand_over_scores(sm.ts, acc, mi, lane);
      cp_async_wait_all();  // tile i + 1's rows, for every warp after the barrier
    }
    __syncthreads();

    float al[2] = {1.0f, 1.0f}, tile_max[2];
    if (kh == 0) online_softmax<true>(sm.ts, acc, sm.kv_valid[buf], a.scale_log2, m_run, l_run, al, tile_max, mi, lane);
    // The other buffer's last readers (tile i - 1's products) all passed the barrier above.
    if (start + kTile < end) dequantise_tile(sm, sm.stage, buf ^ 1);
    const bool rescale = __syncthreads_or(al[0] != 1.0f || al[1] != 1.0f);
    // Every warp is done with the staging rows: the loaders refill them with tile i + 2.
    if (loader && start + 2 * kTile < end) {
      fetch_row(a, sm.stage, start + 2 * kTile + my_row, next_slot, n_main);
      next_slot = slot_at(a, b, s, start + 3 * kTile + my_row, end, n_main);
    }
    accumulate_pv(o, sm.ts, rescale, la, kv_off, g);
    // No barrier here: the next tile's writes to shared memory (S halves, P, alpha, the K/V buffer
    // read above) all come after the next step's first barrier, which every warp reaches only
    // once its products here are done.
  }

  if (kh == 0) publish_row_stats(sm.ts, m_run, l_run, mi, lane);
  __syncthreads();
  const int head0 = block_y_again() * kHeads;

  // Per head: the output factor (1 / sum; with one split also the sink's share) into alpha, and
  // the lse: a split's base-2 lse, or with one split the final natural-log lse (+inf if empty).
  const bool final = a.splits == 1;
  if (tid < kHeads) {
    const float sum = sm.ts.row_sum[tid];
    const float lse2 = sm.ts.row_max[tid] + log2f(sum);
    float factor = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (head0 + tid < a.heads) {
      if (!final) {
        a.part_lse[(token * a.splits + split) * a.heads + head0 + tid] = sum > 0.0f ? lse2 : -INFINITY;
      } else {
        // No slot at all: output 0 and lse +inf whatever the sink (a -inf sink would give 0/0 here).
        if (a.sink != nullptr && sum > 0.0f) factor /= 1.0f + exp2f(a.sink[head0 + tid] * 1.4426950408889634f - lse2);
        a.lse[b * a.lse_stride_b + (head0 + tid) * a.lse_stride_h + s * a.lse_stride_s] =
            sum > 0.0f ? lse2 * 0.6931471805599453f : INFINITY;
      }
    }
    sm.ts.alpha[tid] = factor;
  }
  __syncthreads();

  if (final) {
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + b * a.out_stride_b + s * a.out_stride_s +
                         head0 * a.out_stride_h;
    store_output_bf16_rows(o, sm.ts, &sm.kv[0][0], static_cast<int>(a.heads - head0), warp, lane,
                           [&](int r) { return out + r * a.out_stride_h; });  // the K/V tiles are free
    return;
  }
  // Staged stores gain where a block runs many tiles (batch 32 x 64 heads, 4 splits: 3-5%) and cost
  // where it runs one or two (16 splits at batch 1: +0.6 us on an H200).
  float* part = a.part_o + ((token * a.splits + split) * a.heads + head0) * 512;
  if (a.splits <= 4) {
    store_partial_rows(o, sm.ts, &sm.kv[0][0], static_cast<int>(a.heads - head0), warp, lane,
                       [&](int r) { return part + r * 512; });
  } else {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + 8 * half;
        if (head0 + r >= a.heads) continue;
        const float f = sm.ts.alpha[r];
        float* dst = part + r * 512 + warp * 64 + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
          *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(o[mt][nt][2 * half] * f, o[mt][nt][2 * half + 1] * f);
      }
    }
  }
  if (a.merge_in_kernel) merge_splits_after_barrier(a);
}

// Merges the splits of (query token, head) as split_weights says, when the decode could not merge
// them itself (a grid larger than the card holds at once). A block of kMergeThreads takes 512 / kCols threads per head, each
// kCols of its 512 columns (4 at a time, 512 / kCols * 4 apart, so a warp's accesses stay
// contiguous), so kMergeThreads * kCols / 512 heads. Compiled per split count, so
// every split's loads are in flight at once and a thread holds only its own splits (a loop over a
// run-time count waited one L2 round trip per split: ~2 us more than the Triton combine it replaced
// at batch 1; a 16-wide unrolled one cost occupancy: +8 us at batch 64, on the H200). With 2-3
// splits a thread takes 8 columns: the batch-64 merge is then one wave of blocks, not two (on an
// H200: 5.1 -> 4.5 us at 2 splits; 8 columns at 4 splits were slower, so 4-16 splits keep 4).
constexpr int kMergeThreads = 128;
__host__ __device__ constexpr int merge_heads_per_block(int cols) { return kMergeThreads * cols / 512; }

template <int kSplits, int kCols>
__global__ void __launch_bounds__(kMergeThreads) split_merge_kernel(const VbkSparseDecodeArgs a) {
  constexpr int kThreadsPerHead = 512 / kCols, kHeadsPerBlock = merge_heads_per_block(kCols);
  constexpr int kVecs = kCols / 4, kSpan = 512 / kVecs;  // the v-th 4 columns: col + v * kSpan
  const int64_t token = blockIdx.x, b = token / a.s_q, s = token % a.s_q;
  const int block_head = kHeadsPerBlock == 1 ? blockIdx.y : blockIdx.y * kHeadsPerBlock + threadIdx.x / kThreadsPerHead;
  // An odd head count's last block: its spare threads merge the last head again and store nothing
  // (clamped, not returned early: the loads stay first in the kernel).
  const bool stores = kHeadsPerBlock == 1 || block_head < a.heads;
  const int head = kHeadsPerBlock == 1 ? block_head : min(block_head, static_cast<int>(a.heads) - 1);
  const int head_thread = kHeadsPerBlock == 1 ? threadIdx.x : threadIdx.x % kThreadsPerHead;
  const int col = head_thread * 4;
  const int64_t first = token * kSplits * a.heads + head;  // row (token, split 0, head)
  float lse[kSplits];
  float4 part[kVecs][kSplits];
#pragma unroll
  for (int sp = 0; sp < kSplits; ++sp) {
    const int64_t row = first + sp * a.heads;
    lse[sp] = a.part_lse[row];
#pragma unroll
    for (int v = 0; v < kVecs; ++v) part[v][sp] = *reinterpret_cast<const float4*>(a.part_o + row * 512 + col + v * kSpan);
  }
  const SplitWeights<kSplits> sw = split_weights<kSplits>(lse, a.sink, head);
  if (!stores) return;
  uint32_t* dst = reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(a.out) + b * a.out_stride_b +
                                              s * a.out_stride_s + head * a.out_stride_h + col);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const float4 acc = weighted_sum<kSplits>(part[v], sw);
    dst[v * kSpan / 2] = bf16x2(acc.x * sw.factor, acc.y * sw.factor);
    dst[v * kSpan / 2 + 1] = bf16x2(acc.z * sw.factor, acc.w * sw.factor);
  }
  if (head_thread == 0) a.lse[b * a.lse_stride_b + head * a.lse_stride_h + s * a.lse_stride_s] = sw.lse;
}

template <int kSplits>
static void launch_merge(const VbkSparseDecodeArgs& a, unsigned tokens, cudaStream_t stream) {
  constexpr int kCols = kSplits <= 3 ? 8 : 4;
  constexpr int kHeadsPerBlock = merge_heads_per_block(kCols);
  const unsigned head_blocks = static_cast<unsigned>((a.heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  split_merge_kernel<kSplits, kCols><<<dim3(tokens, head_blocks), kMergeThreads, 0, stream>>>(a);
}

}  // namespace vbk_sparse_mla

#ifndef VBK_MERGE_IN_KERNEL
#define VBK_MERGE_IN_KERNEL 1  // 0: always the separate merge kernel (A/B benchmarks)
#endif

// How many decode blocks the current device holds at once (asked once per device): a cooperative
// launch, whose blocks wait for each other, must not be larger.
static int co_resident_decode_blocks(int smem) {
  static int counts[64] = {};
  int device = 0, sms = 0, per_sm = 0;
  if (vbk_sparse_mla::current_device_sms(device, sms) != cudaSuccess) return 0;
  if (device < 64 && counts[device] > 0) return counts[device];
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vbk_sparse_mla::sparse_decode_kernel,
                                                    vbk_sparse_mla::kThreads, smem) != cudaSuccess) return 0;
  if (device < 64) counts[device] = sms * per_sm;
  return sms * per_sm;
}

// Whether `stream` is recording a CUDA graph. A query that fails (a capture elsewhere forbids it)
// counts as capturing, and its error is cleared so the launch's own check does not report it.
static bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess) return status != cudaStreamCaptureStatusNone;
  (void)cudaGetLastError();
  return true;
}

const char* vbk_sparse_mla_decode_cuda(const VbkSparseDecodeArgs* args, void* stream) {
  using namespace vbk_sparse_mla;
  static bool opted_in[64] = {};
  const int smem = sizeof(Smem);
  if (const char* err = allow_shared_memory(sparse_decode_kernel, smem, opted_in)) return err;
  if (args->splits != 1 && args->splits != 2 && args->splits != 3 && args->splits != 4 && args->splits != 8 &&
      args->splits != 16)
    return "splits must be 1, 2, 3, 4, 8 or 16";
  const dim3 grid(static_cast<unsigned>(args->batch * args->s_q),
                  static_cast<unsigned>((args->heads + kHeads - 1) / kHeads), static_cast<unsigned>(args->splits));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  VbkSparseDecodeArgs a = *args;
  a.merge_in_kernel = 0;
  const int64_t fit = co_resident_decode_blocks(smem), per_token = int64_t(grid.y) * grid.z;
  // Called eagerly, 4-16 splits merge in the kernel: a launch fewer, 3.5-5 us of host time (on an
  // H200). Under graph capture the launch count costs nothing at replay, and
  // split_merge_kernel's graph time was equal or up to 1.5 us lower at every batch; 2-3
  // splits' larger merges are 0.3-1.3 us faster there either way.
  if (VBK_MERGE_IN_KERNEL && a.splits >= 4 && grid.x * per_token <= fit && !capturing(cuda_stream)) {
    a.merge_in_kernel = 1;
    // As many helper "tokens" (blocks that only merge) as the card holds beside the decode's.
    const dim3 coop(static_cast<unsigned>(fit / per_token), grid.y, grid.z);
    void* params[] = {&a};
    if (cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(sparse_decode_kernel), coop, dim3(kThreads), params,
                                    smem, cuda_stream) == cudaSuccess)
      return nullptr;
    (void)cudaGetLastError();  // refused (say, no cooperative launch under this driver mode): merge apart
    a.merge_in_kernel = 0;
  }
  sparse_decode_kernel<<<grid, kThreads, smem, cuda_stream>>>(a);
  switch (a.splits) {
    case 2: launch_merge<2>(a, grid.x, cuda_stream); break;
    case 3: launch_merge<3>(a, grid.x, cuda_stream); break;
    case 4: launch_merge<4>(a, grid.x, cuda_stream); break;
    case 8: launch_merge<8>(a, grid.x, cuda_stream); break;
    case 16: launch_merge<16>(a, grid.x, cuda_stream); break;
    default: break;  // 1: the kernel wrote out and lse
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
