"""The engine's version: upstream vLLM's, plus our patch/plugin revision N (0.32.0+backport.N).

Bump BACKPORT_REVISION whenever engine/patches or engine/vllm_backport change in a release.
"""

VLLM_VERSION = "0.32.0"
BACKPORT_REVISION = 1
ENGINE_VERSION = "%s+backport.%d" % (VLLM_VERSION, BACKPORT_REVISION)

# The pinned CUDA wheel's tags (tools/pins/toolchains.json "vllm".filename; a test checks they agree).
VLLM_WHEEL_TAGS = "cp38-abi3-manylinux_2_28_x86_64"
