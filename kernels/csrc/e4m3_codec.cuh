// e4m3 (float8_e4m3fn) -> float32 with integer bit operations, for host and device code.
// Branch-free on purpose: the sparse MLA decode runs it for every cached NoPE value it reads.
#pragma once
#include <cstdint>
#include <cstring>

__host__ __device__ inline float vbk_bits_to_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

__host__ __device__ inline uint32_t vbk_float_to_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

// c: one e4m3 code in its low 8 bits. Normal codes rebias the exponent 7 -> 127 with one add;
// subnormal codes (exponent field 0) come out of that add as 2^-7 + man*2^-10, and man*2^-9 is
// then 2f - 2^-6 exactly. 0x7f/0xff are NaN; the sign is or-ed back last.
__host__ __device__ inline float vbk_e4m3_to_float(uint32_t c) {
  const uint32_t mag = c & 0x7Fu;
  float f = vbk_bits_to_float((mag << 20) + (120u << 23));
  f = mag < 8 ? f * 2.0f - 0.015625f : f;
  const uint32_t bits = mag == 0x7Fu ? 0x7FC00000u : vbk_float_to_bits(f);
  return vbk_bits_to_float(bits | ((c & 0x80u) << 24));
}

// UE8M0 scale byte (fp8_ds_mla's per-64-value scale) -> 2^(byte - 127); 0 is 2^-127, 255 is NaN.
__host__ __device__ inline float vbk_ue8m0_to_float(uint32_t byte) {
  const uint32_t s = byte & 0xFFu;
  return vbk_bits_to_float(s == 0 ? 0x00400000u : s == 255 ? 0x7FC00000u : s << 23);
}
