"""The container's set-up, checked before `vllm serve` starts an engine or downloads anything.

Each common mistake around the image gets one sentence naming the fix (the README's
"Troubleshooting" section quotes them word for word):
- no GPU visible: the container was started without `--gpus all` (or without NVIDIA's runtime);
- a GPU of another generation than the image's (target.require_sm8x's refusal, at start-up);
- shared memory: tensor parallelism with Docker's default 64 MB /dev/shm (no `ipc: host`);
- the model cache: the mounted Hugging Face cache is not writable by the image's user (or is
  mounted read-only) and the model is not in it yet. A read-only cache that holds the model is
  served as it is, with the hub client offline for the run (serve_from_cache()).

hooks.py runs check_serve() from `vllm serve`'s argument validation (after `--help` and
`--version` have been answered, before the engine is configured) and check_engine() from the
engine-config hook (offline `vllm.LLM(...)` too). Standard library only, apart from asking vLLM
for its platform.
"""

import os

# Tensor/pipeline-parallel workers exchange inputs through a shared-memory queue (vLLM's
# shm_broadcast: 10 chunks of 10 MB per queue) and NCCL keeps its intra-node buffers in /dev/shm.
MIN_SHM_BYTES = 1 << 30
SHM_PATH = "/dev/shm"

NO_GPU = (
    "vllm_backport: no NVIDIA GPU is visible in this container; start it with `docker run --gpus all`, "
    "or in Docker Compose give the service the `deploy.resources.reservations.devices` block "
    "(driver: nvidia, count: all, capabilities: [gpu]), and if Docker then answers that it cannot "
    "select a device driver, install the NVIDIA Container Toolkit on the host and restart Docker.")

SMALL_SHM = (
    "vllm_backport: {path} holds only {size}, too little for {what} (the workers exchange data "
    "through shared memory and NCCL would fail later); start the container with `--ipc=host` "
    "(Docker Compose: `ipc: host`) or give it more with `--shm-size 16g`.")

CACHE_NOT_WRITABLE = (
    "vllm_backport: the model cache {cache} is not writable by uid {uid}, the user this image runs "
    "as, and {model} is not in it yet; run the container as root (`docker run --user 0:0`, or "
    "`user: \"0:0\"` in Docker Compose) or give the directory to uid {uid} on the host "
    "(`sudo chown -R {uid}:{uid} ~/.cache/huggingface`).")

CACHE_READ_ONLY = (
    "vllm_backport: the model cache {cache} is mounted read-only and {model} is not in it yet; "
    "mount it writable (drop `:ro` from the volume) or download the model into it first.")

UNSUPPORTED_GPU = (
    "vllm_backport: this image is built for {sm} ({cards}) but this GPU is sm{value} (compute "
    "capability {major}.{minor}), which no vLLM Backport image targets; run upstream vLLM's own image on it.")


class SetupError(RuntimeError):
    """A set-up mistake around the container; the message says how to fix it."""


def gpu_problem(platform):
    """NO_GPU when vLLM found no device at all (its UnspecifiedPlatform), else None."""
    return NO_GPU if platform.is_unspecified() else None


def generation_problem(capability):
    """In a per-SM image (VLLM_BACKPORT_IMAGE_SM): target.require_sm8x's refusal for a GPU of this
    (major, minor) capability when it is not the image's generation, else None."""
    from vllm_backport import target

    image_sm = os.environ.get(target.IMAGE_SM_ENV)
    if not image_sm or capability is None:
        return None
    major, minor = capability
    if not target.classify((major, minor)).is_sm8x:
        cards = ", ".join(target.sm_table().get(image_sm, {}).get("cards", []))
        return UNSUPPORTED_GPU.format(sm=image_sm, cards=cards, value=major * 10 + minor, major=major, minor=minor)
    try:
        target.require_sm8x((major, minor))
    except target.UnsupportedGpuError as e:
        return f"vllm_backport: {e}"
    return None


def _capability(platform):
    if not platform.is_cuda():
        return None
    cap = platform.get_device_capability()  # NVML on CUDA: no CUDA context
    return (cap.major, cap.minor) if cap else None


def _size(n):
    return f"{n / (1 << 30):.1f} GB" if n >= 1 << 30 else f"{round(n / (1 << 20))} MB"


def shm_bytes(path=SHM_PATH):
    """The size of the file system at path (0 when there is none)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_frsize * st.f_blocks


def shm_problem(tensor_parallel, pipeline_parallel=1, path=SHM_PATH):
    """SMALL_SHM when several local workers would share a /dev/shm below MIN_SHM_BYTES, else None."""
    if tensor_parallel * pipeline_parallel <= 1:
        return None
    size = shm_bytes(path)
    if size >= MIN_SHM_BYTES:
        return None
    what = f"--tensor-parallel-size {tensor_parallel}"
    if pipeline_parallel > 1:
        what += f" --pipeline-parallel-size {pipeline_parallel}"
    return SMALL_SHM.format(path=path, size=_size(size), what=what)


def hub_cache():
    """Where huggingface_hub downloads to: HF_HUB_CACHE, else HF_HOME/hub (as huggingface_hub reads them)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return os.path.join(home, "hub")


def _offline():
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def _repo_dir(cache, model):
    return os.path.join(cache, "models--" + model.replace("/", "--"))


def model_in_cache(cache, model):
    """Whether a snapshot of model (a hub id) with at least one file is in cache."""
    snapshots = os.path.join(_repo_dir(cache, model), "snapshots")
    try:
        return any(os.listdir(os.path.join(snapshots, s)) for s in os.listdir(snapshots))
    except OSError:
        return False


def _existing(path):
    """path, else its nearest existing parent."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _read_only_mount(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _home(cache):
    """HF_HOME for a hub cache at HF_HOME/hub (what users mount), else the cache itself."""
    return os.path.dirname(cache.rstrip("/")) if os.path.basename(cache.rstrip("/")) == "hub" else cache


def cache_problem(model, cache=None):
    """CACHE_NOT_WRITABLE when model would be downloaded into a cache this user cannot write, else None.

    Nothing is downloaded for a local directory, in offline mode, or when the model is already in
    the cache (a read-only cache that holds it serves as it is).
    """
    if not model or os.path.isdir(model) or model.startswith(("/", ".")) or _offline():
        return None
    cache = cache or hub_cache()
    if model_in_cache(cache, model):
        return None
    target = _existing(_repo_dir(cache, model))
    if os.access(target, os.W_OK | os.X_OK):
        return None
    home = _home(cache)
    if _read_only_mount(target):
        return CACHE_READ_ONLY.format(cache=home, model=model)
    return CACHE_NOT_WRITABLE.format(cache=home, uid=os.geteuid(), model=model)


def serve_from_cache(model, cache=None):
    """When the cache is not writable but holds model, the hub cannot add anything to it: switch
    huggingface_hub to offline mode (this process and, through the environment, vLLM's engine
    and workers), so that serving does not depend on the hub answering. Returns a note, or None."""
    if not model or os.path.isdir(model) or model.startswith(("/", ".")) or _offline():
        return None
    cache = cache or hub_cache()
    if not model_in_cache(cache, model) or os.access(_existing(_repo_dir(cache, model)), os.W_OK | os.X_OK):
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True
    except ImportError:
        pass
    return (f"vllm_backport: the model cache {_home(cache)} is read-only for uid {os.geteuid()} and holds "
            f"{model}; serving it from there without asking the hub (HF_HUB_OFFLINE=1).")


def _platform():
    from vllm.platforms import current_platform

    return current_platform


def problems(model, tensor_parallel=1, pipeline_parallel=1, platform=None):
    """Every set-up problem of a `vllm serve` with these arguments (all of them, so that one
    restart can fix them all), the GPU first."""
    platform = platform or _platform()
    found = [gpu_problem(platform), generation_problem(_capability(platform)),
             shm_problem(tensor_parallel, pipeline_parallel), cache_problem(model)]
    return [p for p in found if p]


def check_serve(args):
    """`vllm serve`: exits with one line per problem (no traceback), before anything is downloaded."""
    model = getattr(args, "model_tag", None) or getattr(args, "model", None)
    found = problems(model, getattr(args, "tensor_parallel_size", 1) or 1,
                     getattr(args, "pipeline_parallel_size", 1) or 1)
    if found:
        raise SystemExit("\n".join(found))
    note = serve_from_cache(model)
    if note:
        from vllm.logger import init_logger

        init_logger("vllm.vllm_backport").info(note)


def check_engine():
    """Any engine (offline `vllm.LLM(...)` too): SetupError when no GPU is visible or it is of
    another generation than the image's."""
    platform = _platform()
    problem = gpu_problem(platform) or generation_problem(_capability(platform))
    if problem:
        raise SetupError(problem)
