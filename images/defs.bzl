"""The vLLM Backport image for one GPU generation, as layers from least to most often changed.

vllm_layers() + vllm_image() are used for the product images (images/BUILD, one per row of tools/bazel/sm.bzl) and,
with a tiny wheel set, for the CI test image (tests/images/BUILD): the same rules either way.
"""

load("//tools/bazel/oci:defs.bzl", "oci_image", "oci_layer", "oci_push")
load("//tools/bazel:sm.bzl", "DEFAULT_SM", "SM_TABLE")

SITE = "usr/local/lib/python3.11/dist-packages"

# Upstream binaries that hold no SASS or PTX for sm_89 or below (cuobjdump, shared/notes/images.md)
# or are host tools only for sm90+: they can never load on sm8x, so sm8x images leave them out.
# Paths are globs relative to site-packages (or the image root when they start with "usr/"); the
# sm86 image's SBOM lists what each one removed ("dropped").
HOPPER_ONLY = [
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
    "vllm/_flashkda_C.abi3.so",
    "vllm/_deepselect_C.abi3.so",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_flashmla_extension_C.abi3.so",
    "vllm/_qutlass_C.abi3.so",
    "vllm/third_party/deep_gemm/_C_extension.abi3.so",
    "nccl/ep/lib/cu12/libnccl_ep.so",
    "nccl/ep/lib/cu13/libnccl_ep.so",
    "triton/backends/nvidia/bin/ptxas-blackwell",
]

# FlashInfer holds no prebuilt kernel for sm8x: every one it would run here (top-k/top-p sampling,
# RoPE, norms, attention) is compiled from CUDA source by nvcc and ninja at first use, and the
# registry's flashinfer-cubin (Hopper/Blackwell cubins) has no build for the pinned 0.7.0.post1.
# Without the package vLLM takes its own kernels quietly (has_flashinfer() is False without a
# warning; the sampler is told by VLLM_USE_FLASHINFER_SAMPLER=0 below). The SBOM lists it as dropped.
FLASHINFER = [
    "flashinfer/*",
    "flashinfer_python-*.dist-info/*",
    "build_utils.py",  # flashinfer-python's own top-level helper (no other wheel of the lock has one)
    "usr/local/bin/flashinfer",
]

# Triton's launcher module built ahead of time (images/oci/triton_launcher.py), found by the plugin
# (vllm_backport/triton_launcher.py) through VLLM_BACKPORT_KERNELS_DIR.
TRITON_LAUNCHER = "/usr/local/lib/vllm_backport/triton/cuda_utils"

# Packages no sm8x process needs, by measurement: the GPU end-to-end test (tests/engine/gpu_serve.py,
# tests/device/README.md) served the checkpoints of models/gpu_runs.json emulating sm80/86/89 from a
# bundle that does not carry them. What they serve: the CuTe DSL
# (FlashAttention 4 and DeepSeek-V4's head-512 compressor, sm90+; the route runs ours), TileLang (mHC
# kernels built with nvcc at start-up; the route runs ours), tokenspeed (Blackwell MLA kernels).
# About 970 MB before compression (issue 39's image size).
UNUSED_ON_SM8X = [
    "nvidia_cutlass_dsl/*",
    "nvidia_cutlass_dsl*.dist-info/*",
    "nvidia_cutlass_dsl_packages.pth",
    "usr/local/bin/run-iket",
    "tilelang/*",
    "tilelang-*.dist-info/*",
    "tokenspeed_triton/*",
    "tokenspeed_triton-*.dist-info/*",
    "tokenspeed_mla/*",
    "tokenspeed_mla-*.dist-info/*",
]

# What the product images leave out.
SM8X_DROP = HOPPER_ONLY + FLASHINFER + UNUSED_ON_SM8X

# Where the per-SM kernel shared object goes, and the environment that tells the plugin.
KERNELS_DIR = "/usr/local/lib/vllm_backport"

USER = "vllm"
UID = 1000

# The seed README's compose file mounts the Hugging Face cache at this path.
HF_HOME = "/root/.cache/huggingface"

# Everything compiled on the GPU at first use (bytecode, Triton kernels, torch.compile graphs)
# goes under one folder the user owns, so one volume keeps it across restarts (README).
CACHE_DIR = "/home/%s/.cache" % USER
CACHE_ENV = [
    # No bytecode ships in the image; the first process writes it here and vLLM's workers
    # reuse it (import torch, vllm: 33 s -> 16 s measured in the sm86 chroot).
    "PYTHONPYCACHEPREFIX=%s/python" % CACHE_DIR,
    "TRITON_CACHE_DIR=%s/triton" % CACHE_DIR,
    "TORCHINDUCTOR_CACHE_DIR=%s/torchinductor" % CACHE_DIR,
    # vLLM's own cache (torch.compile artifacts) is ~/.cache/vllm already: VLLM_CACHE_ROOT's default.
]

def drop_globs(paths):
    """HOPPER_ONLY-style paths -> globs on image paths."""
    return [p if p.startswith("usr/") else SITE + "/" + p for p in paths]

def image_tags(sm):
    """The seed's tags: latest-smXX, vX.Y.Z-smXX, and latest for the default SM.

    {version} is filled in by the pusher from the image (which read //:VERSION).
    """
    tags = ["latest-" + sm, "v{version}-" + sm]
    if sm == DEFAULT_SM:
        tags.append("latest")
    return tags

def vllm_layers(
        name,
        debs,
        wheel_layers,
        vllm_wheel,
        plugin_wheel = None,
        plugin_files = {},
        drop = HOPPER_ONLY,
        compression_level = 6,
        tags = ["manual"]):
    """Defines the layers every SM's image shares, <name>_base ... <name>_plugin; returns their labels.

    Args:
      name: prefix of the layer targets, e.g. "sm8x".
      debs: labels of .deb files for the base layer (e.g. ["@debian//:all"]).
      wheel_layers: [(layer name, label of wheels)], bottom first, below the vLLM layer
        (e.g. NVIDIA libraries, then torch, then the rest).
      vllm_wheel: label of the vLLM wheel: upstream from the lock, or the engine's patched wheel.
      plugin_wheel: label of the vllm_backport plugin wheel, or None while the engine has none.
      plugin_files: {label: absolute image path} of files that go with the plugin (the prebuilt
        Triton launcher, under KERNELS_DIR/triton/).
      drop: paths (globs) relative to site-packages left out of every wheel layer (HOPPER_ONLY).
      compression_level: gzip level of the wheel layers (1 fast .. 9 small).
      tags: Bazel tags of every target (full images are "manual": too big for CI).
    """
    oci_layer(
        name = name + "_base",
        layer_name = "base",
        debs = debs,
        fixups = "%s:%d:%s" % (USER, UID, HF_HOME),
        tags = tags,
    )
    layers = [":%s_base" % name]
    top = [("vllm", vllm_wheel)]
    if plugin_wheel:
        top.append(("plugin", plugin_wheel))
    for layer, wheels in list(wheel_layers) + top:
        oci_layer(
            name = "%s_%s" % (name, layer),
            layer_name = layer,
            wheels = [wheels],
            files = plugin_files if layer == "plugin" else {},
            drop = drop_globs(drop),
            compression_level = compression_level,
            tags = tags,
        )
        layers.append(":%s_%s" % (name, layer))
    return layers

def vllm_image(
        name,
        sm,
        layers,
        kernels = None,
        image_name = None,
        source = "",
        tags = ["manual"],
        visibility = None):
    """Defines <name> (oci_image): the shared layers plus this SM's kernel layer and the SBOM.

    Args:
      name: the image target's name, e.g. "sm86_image".
      sm: a key of SM_TABLE ("sm86"); names the kernel .so and sets VLLM_BACKPORT_IMAGE_SM
        (the kernel loader refuses a GPU of another generation, naming the right image).
      layers: what vllm_layers() returned.
      kernels: label of this SM's kernel shared object (e.g. "//kernels:kernels_sm86"), or None for
        an image without one (upstream vLLM for comparison). It goes to
        KERNELS_DIR/libvllm_backport_kernels_<sm>.so, found by the plugin through
        VLLM_BACKPORT_KERNELS_DIR.
      image_name: the image's name (dist/ folder, title label); default "vllm-backport-<sm>".
      source: the org.opencontainers.image.source label; default: git's origin address.
      tags: Bazel tags of every target (full images are "manual": too big for CI).
      visibility: visibility of the image target.
    """
    if sm not in SM_TABLE:
        fail("vllm_image(%s): unknown SM %r; tools/bazel/sm.bzl knows %s" % (name, sm, sorted(SM_TABLE.keys())))
    layers = list(layers)
    env = [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "LANG=C.UTF-8",
        "HOME=/home/" + USER,
        "HF_HOME=" + HF_HOME,
        "VLLM_BACKPORT_IMAGE_SM=" + sm,
        # FlashInfer is not in sm8x images (FLASHINFER above): vLLM's own top-k/top-p sampler.
        "VLLM_USE_FLASHINFER_SAMPLER=0",
    ] + CACHE_ENV
    if kernels:
        so = "%s/libvllm_backport_kernels_%s.so" % (KERNELS_DIR, sm)
        oci_layer(
            name = name + "_kernels",
            layer_name = "kernels",
            files = {kernels: so},
            tags = tags,
        )
        layers.append(":%s_kernels" % name)
        env.append("VLLM_BACKPORT_KERNELS_DIR=" + KERNELS_DIR)

    oci_image(
        name = name,
        layers = layers,
        image_name = image_name or "vllm-backport-" + sm,
        source = source,
        entrypoint = ["vllm", "serve"],
        env = env,
        user = "%d:%d" % (UID, UID),
        workdir = "/home/" + USER,
        ports = ["8000/tcp"],
        labels = {"org.opencontainers.image.description": "vLLM Backport for %s (%s)" % (sm, ", ".join(SM_TABLE[sm].cards))},
        tags = tags,
        visibility = visibility,
    )

def vllm_push(name, image, sm, tags = ["manual"]):
    """`bazel run :<name>`: OCI layout dist/<image name>, or `-- --repository HOST/NAME`.

    Args:
      name: the target's name, e.g. "sm86_push".
      image: the vllm_image target.
      sm: the SM the image is for (picks the tags).
      tags: Bazel tags.
    """
    oci_push(
        name = name,
        image = image,
        tags_to_push = image_tags(sm),
        tags = tags,
    )
