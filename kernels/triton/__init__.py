"""sm8x Triton kernels. Modules import each other only relatively, so the same files work as
`kernels.triton.*` in this tree and as `vllm_backport.kernels.triton.*` in the engine package."""
