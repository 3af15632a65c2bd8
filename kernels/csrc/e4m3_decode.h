// e4m3 decode entry points shared by the device file and the torch op (no torch, no CUDA types).
#pragma once
#include <cstdint>

// Launches on stream; returns nullptr or the CUDA error text.
const char* vbk_e4m3_decode_cuda(const uint8_t* in, float* out, int64_t n, void* stream);
void vbk_e4m3_decode_cpu(const uint8_t* in, float* out, int64_t n);
