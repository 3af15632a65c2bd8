// The output allocations the stable-ABI torch ops share (each .cc includes this; inline, one definition).
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

// An uninitialised contiguous tensor of `sizes` on ref's device (dtype: an aoti_torch_dtype_*() code),
// from the shim's empty_strided, which calls the caching allocator directly. torch::stable::new_empty
// (torch >= 2.10) does the same through a boxed dispatcher call: 0.8 us more per call of a no-op op
// on a Xeon (the lent H200's host), next to a batch-1 decode's ~15 us.
inline torch::stable::Tensor empty_on_device_of(const torch::stable::Tensor& ref,
                                                torch::headeronly::IntHeaderOnlyArrayRef sizes, int32_t dtype,
                                                const char* op) {
  constexpr size_t kMaxDims = 8;
  STD_TORCH_CHECK(sizes.size() <= kMaxDims, op, ": at most 8 dimensions");
  int64_t strides[kMaxDims];
  int64_t step = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = step;
    step *= sizes[d] > 1 ? sizes[d] : 1;
  }
  int32_t device_type = 0, device_index = 0;
  AtenTensorHandle handle = nullptr;
  STD_TORCH_CHECK(aoti_torch_get_device_type(ref.get(), &device_type) == AOTI_TORCH_SUCCESS &&
                      aoti_torch_get_device_index(ref.get(), &device_index) == AOTI_TORCH_SUCCESS &&
                      aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides, dtype,
                                               device_type, device_index, &handle) == AOTI_TORCH_SUCCESS,
                  op, ": could not allocate its output");
  return torch::stable::Tensor(handle);
}
