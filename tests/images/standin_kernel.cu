// A stand-in for libvllm_backport_kernels_<sm>.so in the test image: one tiny kernel, so the
// layer test can check that each image carries the shared object built for its own SM only.
extern "C" __global__ void vllm_backport_standin(float* out) { out[threadIdx.x] = threadIdx.x; }
