# The CUDA compiler and NCCL of `nix develop`, unpacked from exactly the wheel files and sha256 that
# tools/pins/toolchains.json pins for Bazel. nixpkgs' cudaPackages are not used: their NCCL is not the
# pinned release, and two sources for one compiler could drift.
#
#   cuda: bin/nvcc, bin/cuobjdump, bin/nvdisasm, nvvm/, include/, lib/ (the wheels' nvidia/cu13 tree)
#   nccl: include/nccl.h, lib/libnccl.so.2 (the wheel's nvidia/nccl tree)
#
# Each tree carries `manifestName`: the wheels it was unpacked from, which Bazel's cuda_toolchain
# compares with the pins before it uses the tree (tools/bazel/cuda/local_cuda.py).
{ pkgs, lib, pins }:
let
  manifestName = "vllm-backport-pins.json";

  # A wheel fetched by its pinned file name and sha256 (a fixed-output derivation); the download
  # location is nixpkgs' fetchPypi's business, not this repository's.
  fetchWheel = entry:
    let w = lib.wheelFields entry.filename;
    in pkgs.fetchPypi {
      inherit (w) pname version python abi platform;
      dist = w.python;
      format = "wheel";
      sha256 = entry.sha256;
    };

  # `subdir` of every wheel in `entries`, merged into one tree. Binaries are patched for the Nix
  # loader (autoPatchelfHook) so they also run on NixOS; libcuda comes from the host's driver.
  unpackWheels = { pname, version, entries, subdir }:
    pkgs.stdenv.mkDerivation {
      inherit pname version;
      srcs = map fetchWheel entries;
      nativeBuildInputs = [ pkgs.unzip pkgs.autoPatchelfHook ];
      buildInputs = [ pkgs.stdenv.cc.cc.lib pkgs.zlib ];
      autoPatchelfIgnoreMissingDeps = [ "libcuda.so.1" ];
      manifest = builtins.toJSON (map (e: { inherit (e) name version sha256; }) entries);
      passAsFile = [ "manifest" ];
      dontConfigure = true;
      dontBuild = true;
      unpackPhase = ''
        for wheel in $srcs; do unzip -q -o "$wheel" -d wheels; done
      '';
      installPhase = ''
        mkdir -p "$out"
        cp -r wheels/${subdir}/. "$out/"
        cp "$manifestPath" "$out/${manifestName}"
        if [ -e "$out/lib/libnccl.so.2" ] && [ ! -e "$out/lib/libnccl.so" ]; then
          ln -s libnccl.so.2 "$out/lib/libnccl.so"
        fi
      '';
      passthru.wheels = entries;
    };

  compilerWheels = pins.cuda_compiler ++ pins.cuda_tools;
in
{
  inherit manifestName;

  # Named by nvcc's version: the version the drift check compares with the pin.
  cuda = unpackWheels {
    pname = "vllm-backport-cuda";
    version = (lib.wheelFields (lib.entryNamed "nvidia-cuda-nvcc" pins.cuda_compiler).filename).version;
    entries = compilerWheels;
    subdir = "nvidia/cu13";
  };

  nccl = unpackWheels {
    pname = "vllm-backport-nccl";
    version = (lib.wheelFields pins.nccl.filename).version;
    entries = [ pins.nccl ];
    subdir = "nvidia/nccl";
  };
}
