// Argument checks the stable-ABI torch ops share (each .cc includes this; inline, one definition).
#pragma once

#include <torch/csrc/stable/tensor.h>

// Fails with "<op>: <name> must be on <ref_name>'s CUDA device" unless t sits on ref's CUDA device.
inline void check_on_device_of(const torch::stable::Tensor& t, const torch::stable::Tensor& ref, const char* op,
                               const char* name, const char* ref_name = "q") {
  STD_TORCH_CHECK(t.is_cuda() && t.get_device_index() == ref.get_device_index(), op, ": ", name, " must be on ",
                  ref_name, "'s CUDA device");
}
