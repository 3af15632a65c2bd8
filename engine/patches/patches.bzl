"""The patch series against vLLM 0.32.0, in the order it is applied (a test checks that every
.patch file in this folder is listed)."""

PATCHES = [
    "//engine/patches:0001-cli-version-without-vllm-distribution.patch",
    "//engine/patches:0002-cpu-dsv4-swa-tile-sched-keys.patch",
    "//engine/patches:0003-json-flag-shell-quoting-hint.patch",
    "//engine/patches:0004-cli-without-a-device.patch",
    "//engine/patches:0005-marlin-moe-w13-scale-permutation.patch",
]
