// The steps the sparse MLA decode and prefill kernels share, for sm80/86/89 (mma.sync, ldmatrix,
// cp.async; no Hopper instructions): one block = 64 query heads x 8 warps over tiles of 32 bf16
// K/V rows of 512 dims in swizzled shared memory.
//   S = Q K^T: warp w holds heads [16 (w % 4), +16) x dims [256 (w / 4), +256) of the queries as
//     mma fragments in registers and multiplies them by the tile's rows; warps 4-7 hand their
//     half of S to warps 0-3 through shared memory;
//   softmax: warps 0-3 run the base-2 online softmax of their 16 heads and write P (bf16);
//   O += P V: warp w owns output columns [64w, 64w + 64) of all 64 heads (128 fp32 registers).
// So warps 0-3 read only dims 0-255 of a tile and warps 4-7 only dims 256-511, in both products.
// Everything here is forceinline: the kernels' register allocation sees one function.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace vbk_sparse_mla {

constexpr int kHeads = 64;          // query heads per block
constexpr int kTile = 32;           // K/V rows per step
constexpr int kChunks = 512 / 8;    // 16-byte chunks per bf16 row of 512
constexpr int kThreads = 256;       // 8 warps
constexpr int kPStride = kTile + 8;  // bf16 per P row; the padding keeps ldmatrix conflict-free
constexpr float kMaxSlack = 8.0f;    // see online_softmax

// The block's shared state besides the K/V tiles.
struct TileShared {
  uint32_t p[kHeads * kPStride / 2];   // softmax numerators, bf16 pairs
  float s_half[4][4 * kTile / 8][32];  // dims 256-511's share of S, per head group, in mma-fragment order
  float alpha[kHeads];                 // rescale of the running output this step; then output factors
  float row_sum[kHeads];
  float row_max[kHeads];
};

// 16-byte chunk `chunk` of row `row`: xor-swizzled so 8 rows reading one column hit 8 banks.
// The xor stays inside the chunk's group of 8, so a row's dims 0-255 stay in chunks 0-31.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kChunks + (chunk ^ (row & 7)); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// addr: a shared-memory address (smem_u32), so lane addresses computed once plus constant
// offsets cost no instructions in the unrolled loops.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// Byte address of 16-byte chunk 8 * group + j of a swizzled row, as the base of that row plus
// ((j ^ (row & 7)) * 16) + 128 * group: callers keep base + the xor part per lane.
__device__ __forceinline__ uint32_t swz_lane(uint32_t row_base, int row, int j) {
  return row_base + ((j ^ (row & 7)) << 4);
}

// d += a (16x16 bf16, row) * b (16x8 bf16, col), float32 accumulate.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}

// 16 bytes from src, or 16 zero bytes when !copy (src must still be a valid address).
__device__ __forceinline__ void cp_async16_or_zero(void* dst, const void* src, bool copy) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(copy ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Waits until at most kPending of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The lane addresses of one warp's ldmatrix reads (see swz), relative to K/V tile 0 at kv_base:
// K rows (lane & 7) + 8 (lane >> 4) at chunks 2 j + ((lane >> 3) & 1) of the warp's dims, i.e.
// {0, 2, 4, 6} + that bit within each group of 8 chunks; V rows (lane & 15) at chunks
// 2 np + (lane >> 4) of the warp's columns; P rows (lane & 15).
struct LaneAddrs {
  uint32_t k[4], v[4], p;
};

__device__ __forceinline__ LaneAddrs lane_addrs(uint32_t kv_base, const TileShared& ts, int warp, int lane) {
  LaneAddrs a;
  const int kh = warp >> 2, k_row = (lane & 7) + ((lane >> 4) << 3), v_row = lane & 15;
#pragma unroll
  for (int j = 0; j < 4; ++j) a.k[j] = swz_lane(kv_base + k_row * 1024 + kh * 512, k_row, 2 * j + ((lane >> 3) & 1));
#pragma unroll
  for (int j = 0; j < 4; ++j) a.v[j] = swz_lane(kv_base + v_row * 1024 + warp * 128, v_row, 2 * j + (lane >> 4));
  a.p = smem_u32(ts.p) + ((lane & 15) * kPStride + (lane >> 4) * 8) * 2;
  return a;
}

// Query fragments straight from global memory: step j covers dims 256 kh + 16 j; registers
// a0..a3 = (row g, cols 2t..) (row g + 8, 2t..) (g, 2t + 8..) (g + 8, 2t + 8..). q0 / q1 point at
// dim 256 kh + 2t of this lane's two heads; a missing head (h0 / h1 false) gives zeros. Queries
// and outputs are read / written once: streaming loads and stores keep them from evicting the
// K/V rows other blocks still read from L2 (3% faster prefill at 8K-32K tokens on the H200).
__device__ __forceinline__ void load_queries(uint32_t (&qf)[16][4], const __nv_bfloat16* q0, const __nv_bfloat16* q1,
                                             bool h0, bool h1) {
  const uint32_t* w0 = reinterpret_cast<const uint32_t*>(q0);
  const uint32_t* w1 = reinterpret_cast<const uint32_t*>(q1);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    qf[j][0] = h0 ? __ldcs(w0 + 8 * j) : 0u;
    qf[j][1] = h1 ? __ldcs(w1 + 8 * j) : 0u;
    qf[j][2] = h0 ? __ldcs(w0 + 8 * j + 4) : 0u;
    qf[j][3] = h1 ? __ldcs(w1 + 8 * j + 4) : 0u;
  }
}

__device__ __forceinline__ void zero_output(float (&o)[4][8][4]) {
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) o[mt][nt][k] = 0.0f;
}

// S for 16 heads x 32 rows over this warp's 256 dims (K tile at byte offset kv_off): four
// n-tiles of 8 rows, four independent accumulator chains.
__device__ __forceinline__ void score_tile(float (&acc)[4][4], const uint32_t (&qf)[16][4], const LaneAddrs& la,
                                           uint32_t kv_off) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[i][k] = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    uint32_t lo[4], hi[4];
    ldmatrix_x4(lo, la.k[j & 3] + kv_off + (j >> 2) * 128);
    ldmatrix_x4(hi, la.k[j & 3] + kv_off + (j >> 2) * 128 + 16 * 1024);
    mma(acc[0], qf[j], lo[0], lo[1]);
    mma(acc[1], qf[j], lo[2], lo[3]);
    mma(acc[2], qf[j], hi[0], hi[1]);
    mma(acc[3], qf[j], hi[2], hi[3]);
  }
}

// Warps 4-7: hand this warp's half of S to the warp with the same heads.
__device__ __forceinline__ void hand_over_scores(TileShared& ts, const float (&acc)[4][4], int mi, int lane) {
#pragma unroll
  for (int i = 0; i < 16; ++i) ts.s_half[mi][i][lane] = acc[i >> 2][i & 3];
}

// 2^x without exp2f's subnormal fix-up (ex2.approx.ftz: results below 2^-126 become 0, which a
// softmax weight next to its maximum's 1 can be): about 50 fewer instructions per softmax step.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Warps 0-3, after the barrier that publishes s_half: the base-2 online softmax step of heads
// r0 = 16 mi + g and r1 = r0 + 8 over the tile's 32 rows (valid[row]: does the row hold a token).
// Updates m_run / l_run (l_run summed over this lane's columns only), writes P and alpha, and
// returns the tile's true row maxima in tile_max (-inf where no row is valid). A score equal to
// the running max gets weight 1 exactly (x - max is 0). kFtz: exp2 without the subnormal fix-up.
template <bool kFtz>
__device__ __forceinline__ void online_softmax(TileShared& ts, const float (&acc)[4][4], const int* valid,
                                               float scale_log2, float (&m_run)[2], float (&l_run)[2],
                                               float (&alpha)[2], float (&tile_max)[2], int mi, int lane) {
  const auto ex2 = [](float v) { return kFtz ? exp2_ftz(v) : exp2f(v); };
  const int g = lane >> 2, t = lane & 3, r0 = mi * 16 + g, r1 = r0 + 8;
  float x[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int col = nt * 8 + 2 * t;
    const bool v0 = valid[col], v1 = valid[col + 1];
    x[nt][0] = v0 ? (acc[nt][0] + ts.s_half[mi][4 * nt + 0][lane]) * scale_log2 : -INFINITY;
    x[nt][1] = v1 ? (acc[nt][1] + ts.s_half[mi][4 * nt + 1][lane]) * scale_log2 : -INFINITY;
    x[nt][2] = v0 ? (acc[nt][2] + ts.s_half[mi][4 * nt + 2][lane]) * scale_log2 : -INFINITY;
    x[nt][3] = v1 ? (acc[nt][3] + ts.s_half[mi][4 * nt + 3][lane]) * scale_log2 : -INFINITY;
  }
  float tm0 = -INFINITY, tm1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    tm0 = fmaxf(tm0, fmaxf(x[nt][0], x[nt][1]));
    tm1 = fmaxf(tm1, fmaxf(x[nt][2], x[nt][3]));
  }
  tm0 = fmaxf(tm0, __shfl_xor_sync(0xffffffffu, tm0, 1));
  tm0 = fmaxf(tm0, __shfl_xor_sync(0xffffffffu, tm0, 2));
  tm1 = fmaxf(tm1, __shfl_xor_sync(0xffffffffu, tm1, 1));
  tm1 = fmaxf(tm1, __shfl_xor_sync(0xffffffffu, tm1, 2));
  tile_max[0] = tm0;
  tile_max[1] = tm1;
  // The running max moves only when a tile's max passes it by more than kMaxSlack (base 2):
  // probabilities stay <= 2^kMaxSlack (exact enough in bf16 and float32), and most tiles
  // then leave every alpha at 1, so the block skips rescaling its output registers.
  const float mn0 = tm0 > m_run[0] + kMaxSlack ? tm0 : m_run[0];
  const float mn1 = tm1 > m_run[1] + kMaxSlack ? tm1 : m_run[1];
  const float al0 = ex2(m_run[0] - mn0), al1 = ex2(m_run[1] - mn1);
  m_run[0] = mn0;
  m_run[1] = mn1;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const float p0 = ex2(x[nt][0] - mn0), p1 = ex2(x[nt][1] - mn0);
    const float p2 = ex2(x[nt][2] - mn1), p3 = ex2(x[nt][3] - mn1);
    l_run[0] = (nt == 0 ? l_run[0] * al0 : l_run[0]) + p0 + p1;
    l_run[1] = (nt == 0 ? l_run[1] * al1 : l_run[1]) + p2 + p3;
    const int col = nt * 8 + 2 * t;
    ts.p[(r0 * kPStride + col) / 2] = bf16x2(p0, p1);
    ts.p[(r1 * kPStride + col) / 2] = bf16x2(p2, p3);
  }
  if (t == 0) {
    ts.alpha[r0] = al0;
    ts.alpha[r1] = al1;
  }
  alpha[0] = al0;
  alpha[1] = al1;
}

// O = O * alpha (per head) + P V over the tile at byte offset kv_off, this warp's 64 columns.
__device__ __forceinline__ void accumulate_pv(float (&o)[4][8][4], const TileShared& ts, bool rescale,
                                              const LaneAddrs& la, uint32_t kv_off, int g) {
  if (rescale) {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      const float lo = ts.alpha[mt * 16 + g], hi = ts.alpha[mt * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        o[mt][nt][0] *= lo;
        o[mt][nt][1] *= lo;
        o[mt][nt][2] *= hi;
        o[mt][nt][3] *= hi;
      }
    }
  }
#pragma unroll
  for (int ks = 0; ks < kTile / 16; ++ks) {  // rows 16 ks .. 16 ks + 15
    uint32_t pf[4][4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) ldmatrix_x4(pf[mt], la.p + mt * 16 * kPStride * 2 + ks * 32);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, la.v[np] + kv_off + ks * 16 * 1024);
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        mma(o[mt][2 * np], pf[mt], vf[0], vf[1]);
        mma(o[mt][2 * np + 1], pf[mt], vf[2], vf[3]);
      }
    }
  }
}

// Warps 0-3 after the last tile: each head's row sum (over the lane quad) and running max into
// shared memory (published by the caller's next barrier).
__device__ __forceinline__ void publish_row_stats(TileShared& ts, const float (&m_run)[2], const float (&l_run)[2],
                                                  int mi, int lane) {
  const int g = lane >> 2, t = lane & 3, r0 = mi * 16 + g, r1 = r0 + 8;
  float l0 = l_run[0] + __shfl_xor_sync(0xffffffffu, l_run[0], 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  float l1 = l_run[1] + __shfl_xor_sync(0xffffffffu, l_run[1], 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (t == 0) {
    ts.row_sum[r0] = l0;
    ts.row_sum[r1] = l1;
    ts.row_max[r0] = m_run[0];
    ts.row_max[r1] = m_run[1];
  }
}

// bf16 output of this warp's 64 columns for heads below `heads` (relative to the block's first),
// each row scaled by ts.alpha: dst(r) points at column 0 of head r's output row.
template <typename RowPtr>
__device__ __forceinline__ void store_output_bf16(const float (&o)[4][8][4], const TileShared& ts, int heads, int warp,
                                                  int lane, RowPtr dst) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = mt * 16 + g + 8 * half;
      if (r >= heads) continue;
      const float f = ts.alpha[r];
      __nv_bfloat16* row = dst(r) + warp * 64 + 2 * t;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        __stcs(reinterpret_cast<unsigned int*>(row + nt * 8), bf16x2(o[mt][nt][2 * half] * f, o[mt][nt][2 * half + 1] * f));
    }
  }
}

// store_output_bf16 through `stage` (64 KB of free shared memory: a 64 x 512 bf16 tile, chunks
// swizzled as K/V tiles are), then 16-byte row stores: each warp stores 512 contiguous bytes per
// instruction, where the fragments' 4-byte stores each cover 16 bytes of 8 rows and held up the
// decode block's end (measured on an H200). dst(r) must be 16-byte aligned. The caller's barrier
// comes first (the stage's last readers are done). The prefill keeps store_output_bf16: its two
// barriers more per token cost it 4-5%.
template <typename RowPtr>
__device__ __forceinline__ void store_output_bf16_rows(const float (&o)[4][8][4], const TileShared& ts, uint4* stage,
                                                       int heads, int warp, int lane, RowPtr dst) {
  const int g = lane >> 2, t = lane & 3;
  uint32_t* words = reinterpret_cast<uint32_t*>(stage);
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = mt * 16 + g + 8 * half;
      const float f = ts.alpha[r];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        words[swz(r, warp * 8 + nt) * 4 + t] = bf16x2(o[mt][nt][2 * half] * f, o[mt][nt][2 * half + 1] * f);
    }
  }
  __syncthreads();
  // Thread tid: chunk tid % 64 of rows tid / 64 + 4 i.
  const int c = threadIdx.x & (kChunks - 1), r0 = threadIdx.x / kChunks;
#pragma unroll
  for (int i = 0; i < kHeads * kChunks / kThreads; ++i) {
    const int r = r0 + i * (kThreads / kChunks);
    if (r < heads) __stcs(reinterpret_cast<uint4*>(dst(r)) + c, stage[swz(r, c)]);
  }
}

// Host: a kernel's opt-in to `bytes` of dynamic shared memory (above 48 KB a block must ask), once
// per device; done[] remembers where it was granted (a repeat from a racing thread is harmless).
// Returns nullptr or the error text.
template <typename Kernel>
inline const char* allow_shared_memory(Kernel kernel, int bytes, bool (&done)[64]) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess && !(device < 64 && done[device])) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err == cudaSuccess && device < 64) done[device] = true;
  }
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Host: the current device and its SM count, asked once per device.
inline cudaError_t current_device_sms(int& device, int& sms) {
  static int counts[64] = {};
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 64 && counts[device] > 0) {
    sms = counts[device];
    return cudaSuccess;
  }
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess && device < 64) counts[device] = sms;
  return err;
}

// Host: blocks along a persistent grid's token axis: one block per SM over `per_token` blocks
// (head groups) per token, at most one per token.
inline unsigned persistent_blocks(int64_t tokens, int sms, int64_t per_token) {
  const int64_t fit = sms / per_token > 0 ? sms / per_token : 1;
  return static_cast<unsigned>(tokens < fit ? tokens : fit);
}

}  // namespace vbk_sparse_mla
