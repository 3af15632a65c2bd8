// fp8_ds_mla cache rows -> bf16, the dequantisation the CUDA kernels share (the sparse MLA decode
// decodes each fetched tile in shared memory; the gathers write rows to global memory): one
// 16-byte chunk of e4m3 codes and its UE8M0 scale byte at a time.
#pragma once

#include <cstdint>

#include "e4m3_codec.cuh"
#include "sparse_mla_tile.cuh"

namespace vbk_sparse_mla {

// Four e4m3 codes (one word, lowest byte first) times 2^(scale_byte - 127) -> four bf16 values in
// float32 arithmetic: the slow path of dequantise_chunk.
__device__ __forceinline__ uint2 e4m3x4_scaled_float(uint32_t codes, uint32_t scale_byte) {
  const float scale = vbk_ue8m0_to_float(scale_byte);
  return make_uint2(bf16x2(vbk_e4m3_to_float(codes) * scale, vbk_e4m3_to_float(codes >> 8) * scale),
                    bf16x2(vbk_e4m3_to_float(codes >> 16) * scale, vbk_e4m3_to_float(codes >> 24) * scale));
}

// Two e4m3 codes (the bytes of codes that kSel picks) -> the bf16 pair whose bits are each code's sign and its 7
// magnitude bits moved into bf16's exponent and mantissa fields: the code's value times 2^-120
// (e4m3's exponent bias is 7, bf16's 127), exactly, subnormal codes included (they land on bf16
// subnormals). Not for NaN codes (0x7f, 0xff).
template <uint32_t kSel>
__device__ __forceinline__ uint32_t e4m3x2_bits(uint32_t codes) {
  const uint32_t hi = __byte_perm(codes, 0, kSel);  // code k in the high byte of 16-bit lane k
  return (hi & 0x80008000u) | ((hi >> 4) & 0x07F007F0u);
}

// d = a * b on bf16 pairs, rounded once (sm80's packed bf16 FMA with -0 added).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// Sixteen e4m3 codes (one 16-byte chunk) times 2^(scale_byte - 127) -> sixteen bf16 values, the
// two 16-byte chunks lo and hi. Integer and packed-bf16 operations on every SM (sm89's hardware
// e4m3 convert goes through f16 and float32 and costs more here): the codes' bits times the bf16
// 2^(scale_byte - 7), which is exact because every product is a bf16 or rounds once into bf16's
// subnormals, as float32-then-bf16 does. That factor is a bf16 for scale bytes up to 134
// (tensors up to 2^7 x 448 in magnitude). Returns false, leaving lo and hi wrong, for larger
// bytes and for NaN codes: the caller redoes such a chunk with dequantise_chunk_float.
__device__ __forceinline__ bool dequantise_chunk(uint4 w, uint32_t scale_byte, uint4& lo, uint4& hi) {
  const uint32_t nan = ((w.x & 0x7F7F7F7Fu) + 0x01010101u) | ((w.y & 0x7F7F7F7Fu) + 0x01010101u) |
                       ((w.z & 0x7F7F7F7Fu) + 0x01010101u) | ((w.w & 0x7F7F7F7Fu) + 0x01010101u);
  const uint32_t f = (scale_byte + 120) * 0x00800080u;  // bf16 pair 2^(scale_byte - 7)
  lo = make_uint4(bf16x2_mul(e4m3x2_bits<0x1404>(w.x), f), bf16x2_mul(e4m3x2_bits<0x3424>(w.x), f),
                  bf16x2_mul(e4m3x2_bits<0x1404>(w.y), f), bf16x2_mul(e4m3x2_bits<0x3424>(w.y), f));
  hi = make_uint4(bf16x2_mul(e4m3x2_bits<0x1404>(w.z), f), bf16x2_mul(e4m3x2_bits<0x3424>(w.z), f),
                  bf16x2_mul(e4m3x2_bits<0x1404>(w.w), f), bf16x2_mul(e4m3x2_bits<0x3424>(w.w), f));
  return scale_byte <= 134 && !(nan & 0x80808080u);
}

// pair with its 16-bit lanes set to NaN where the code kSel picks for that lane is a NaN code (magnitude 0x7f).
template <uint32_t kSel>
__device__ __forceinline__ uint32_t with_nan_codes(uint32_t codes, uint32_t pair) {
  const uint32_t hi = __byte_perm(codes, 0, kSel);
  const uint32_t nan = (((hi & 0x7F007F00u) + 0x01000100u) & 0x80008000u) >> 15;  // 1 in each NaN lane
  return pair | nan * 0x7FC0u;
}

// dequantise_chunk for every code and scale byte, without leaving packed bf16: scale bytes past
// 134 first multiply by 2^127 (exact: an e4m3 value times 2^7 is a normal bf16) and round once in
// the second product by 2^(scale_byte - 134); NaN codes are patched in afterwards. The gathers
// use it (their random caches hit both cases, a float32 redo stalls the warp); the decode keeps
// dequantise_chunk, one product per pair, where issue slots are scarcer.
__device__ __forceinline__ void dequantise_chunk_exact(uint4 w, uint32_t scale_byte, uint4& lo, uint4& hi) {
  const bool big = scale_byte > 134;
  const uint32_t f1 = (big ? 254u : scale_byte + 120) * 0x00800080u;  // 2^127 or 2^(scale_byte - 7)
  const uint32_t f2 = (big ? scale_byte - 7 : 127u) * 0x00800080u;    // 2^(scale_byte - 134) or 1
  const auto scaled = [&](uint32_t bits) { return bf16x2_mul(bf16x2_mul(bits, f1), f2); };
  lo = make_uint4(scaled(e4m3x2_bits<0x1404>(w.x)), scaled(e4m3x2_bits<0x3424>(w.x)),
                  scaled(e4m3x2_bits<0x1404>(w.y)), scaled(e4m3x2_bits<0x3424>(w.y)));
  hi = make_uint4(scaled(e4m3x2_bits<0x1404>(w.z)), scaled(e4m3x2_bits<0x3424>(w.z)),
                  scaled(e4m3x2_bits<0x1404>(w.w)), scaled(e4m3x2_bits<0x3424>(w.w)));
  // The NaN-code test of dequantise_chunk, written out there too: moving it into a shared helper
  // changed the decode's register allocation (its SASS grew by 192 instructions).
  const uint32_t nan = ((w.x & 0x7F7F7F7Fu) + 0x01010101u) | ((w.y & 0x7F7F7F7Fu) + 0x01010101u) |
                       ((w.z & 0x7F7F7F7Fu) + 0x01010101u) | ((w.w & 0x7F7F7F7Fu) + 0x01010101u);
  if (nan & 0x80808080u) {
    lo = make_uint4(with_nan_codes<0x1404>(w.x, lo.x), with_nan_codes<0x3424>(w.x, lo.y),
                    with_nan_codes<0x1404>(w.y, lo.z), with_nan_codes<0x3424>(w.y, lo.w));
    hi = make_uint4(with_nan_codes<0x1404>(w.z, hi.x), with_nan_codes<0x3424>(w.z, hi.y),
                    with_nan_codes<0x1404>(w.w, hi.z), with_nan_codes<0x3424>(w.w, hi.w));
  }
}

// The same chunk in float32 arithmetic, for every code and scale byte (the rare slow path).
// inline: one definition for every file that includes this header; __noinline__ keeps it out of the hot code.
__device__ inline __noinline__ void dequantise_chunk_float(uint4 w, uint32_t scale_byte, uint4* lo, uint4* hi) {
  const uint2 a = e4m3x4_scaled_float(w.x, scale_byte), b = e4m3x4_scaled_float(w.y, scale_byte);
  const uint2 c = e4m3x4_scaled_float(w.z, scale_byte), d = e4m3x4_scaled_float(w.w, scale_byte);
  *lo = make_uint4(a.x, a.y, b.x, b.y);
  *hi = make_uint4(c.x, c.y, d.x, d.y);
}

}  // namespace vbk_sparse_mla
