# Plain functions over tools/pins/toolchains.json, shared by flake.nix and the tests, so the Nix
# shell and Bazel read one set of pins and cannot disagree. Imports nothing fetched.
rec {
  readPins = path: builtins.fromJSON (builtins.readFile path);

  # "3.11" -> "python311", the nixpkgs attribute of the pinned interpreter.
  pythonAttr = pins:
    "python" + builtins.replaceStrings [ "." ] [ "" ] pins.python.version;

  versionOf = name: entries:
    (builtins.head (builtins.filter (e: e.name == name) entries)).version;

  # Exported into `nix develop` so tools and people can see which pins the shell stands on.
  shellEnv = pins: {
    VLLM_BACKPORT_PYTHON = pins.python.version;
    VLLM_BACKPORT_NVCC = versionOf "nvidia-cuda-nvcc" pins.cuda_compiler;
    VLLM_BACKPORT_NCCL = pins.nccl.version;
    VLLM_BACKPORT_VLLM = pins.vllm.version;
    VLLM_BACKPORT_TORCH = pins.torch.version;
    VLLM_BACKPORT_TRITON = pins.triton.version;
  };
}
