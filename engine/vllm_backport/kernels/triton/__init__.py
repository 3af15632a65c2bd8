"""Device code of the sm8x Triton kernels (the host side lives one folder up)."""
