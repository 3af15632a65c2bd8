# Plain functions over the repository's data files (tools/pins/toolchains.json, tools/bazel/sm.bzl),
# shared by flake.nix and the tests, so the Nix shell and Bazel read one set of pins and cannot
# disagree. Imports nothing fetched: everything here evaluates offline.
rec {
  readPins = path: builtins.fromJSON (builtins.readFile path);

  # "3.11" -> "python311", the nixpkgs attribute of the pinned interpreter.
  pythonAttr = pins:
    "python" + builtins.replaceStrings [ "." ] [ "" ] pins.python.version;

  entryNamed = name: entries:
    let found = builtins.filter (e: e.name == name) entries;
    in if found == [ ] then throw "tools/pins/toolchains.json has no entry ${name}" else builtins.head found;

  versionOf = name: entries: (entryNamed name entries).version;

  # Exported into `nix develop` so tools and people can see which pins the shell stands on.
  shellEnv = pins: {
    VLLM_BACKPORT_PYTHON = pins.python.version;
    VLLM_BACKPORT_NVCC = versionOf "nvidia-cuda-nvcc" pins.cuda_compiler;
    VLLM_BACKPORT_NCCL = pins.nccl.version;
    VLLM_BACKPORT_VLLM = pins.vllm.version;
    VLLM_BACKPORT_TORCH = pins.torch.version;
    VLLM_BACKPORT_TRITON = pins.triton.version;
  };

  # The fields of a wheel file name (PEP 427, without a build tag):
  # "nvidia_nccl_cu13-2.29.7-py3-none-manylinux_2_18_x86_64.whl"
  #   -> { pname = "nvidia_nccl_cu13"; version = "2.29.7"; python = "py3"; abi = "none"; platform = ...; }
  wheelFields = filename:
    let
      stem = builtins.match "(.*)\\.whl" filename;
      parts = if stem == null then [ ] else builtins.filter builtins.isString (builtins.split "-" (builtins.head stem));
      at = builtins.elemAt parts;
    in
    if builtins.length parts != 5 then
      throw "${filename} is not a wheel file name of the form NAME-VERSION-PYTHON-ABI-PLATFORM.whl"
    else {
      pname = at 0;
      version = at 1;
      python = at 2;
      abi = at 3;
      platform = at 4;
    };

  # The SM names of tools/bazel/sm.bzl's SM_TABLE ("sm80": struct(...)), sorted like Bazel's SMS.
  smNames = smBzl:
    let found = builtins.filter builtins.isList (builtins.split "\"(sm[0-9]+)\": struct\\(" smBzl);
    in builtins.sort builtins.lessThan (map builtins.head found);

  # The versions toolchains.json pins for the two toolchains the shell carries.
  pinnedToolchainVersions = pins: {
    nvcc = versionOf "nvidia-cuda-nvcc" pins.cuda_compiler;
    nccl = pins.nccl.version;
  };

  # `value` when every toolchain the flake provides ({ nvcc = "13.0.88"; nccl = "2.29.7"; }) has
  # the version toolchains.json pins; otherwise evaluation stops, naming each difference.
  requirePinnedToolchains = pins: provided: value:
    let
      want = pinnedToolchainVersions pins;
      wrong = builtins.filter (name: provided.${name} != want.${name}) (builtins.attrNames want);
      describe = name: "${name}: the flake provides ${provided.${name}}, tools/pins/toolchains.json pins ${want.${name}}";
    in
    if wrong == [ ] then value
    else throw ("the flake's toolchains differ from the pins (regenerate with `./bazelw run //tools/pins:update`):\n"
      + builtins.concatStringsSep "\n" (map describe wrong));
}
