# `nix flake check`: what can run in Nix's build sandbox, which has no network. `bazel test //...`
# cannot (its first build installs the pinned Python lock through pip): that is `nix run .#test`.
{ pkgs, lib, pins, toolchains, bazel, src }:
let
  want = lib.pinnedToolchainVersions pins;
  cudaTool = name: lib.versionOf name pins.cuda_tools;
in
{
  # The unpacked compilers and NCCL report the pinned versions when run, not only by file name.
  toolchains = pkgs.runCommand "vllm-backport-toolchain-versions" { } ''
    expect() {  # expect WHAT GOT WANT
      if [ "$2" != "$3" ]; then echo "$1 is $2, tools/pins/toolchains.json pins $3" >&2; exit 1; fi
    }
    reported() { "$1" --version | sed -n 's/.*, V\([0-9.]*\)$/\1/p'; }
    expect nvcc "$(reported ${toolchains.cuda}/bin/nvcc)" ${want.nvcc}
    expect cuobjdump "$(reported ${toolchains.cuda}/bin/cuobjdump)" ${cudaTool "nvidia-cuda-cuobjdump"}
    expect nvdisasm "$(reported ${toolchains.cuda}/bin/nvdisasm)" ${cudaTool "nvidia-cuda-nvdisasm"}
    nccl=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' ${toolchains.nccl}/include/nccl.h)
    expect NCCL "$nccl" ${want.nccl}
    touch "$out"
  '';

  # The shell's Bazel (7.x) loads every package with the repository's flags for it: the Starlark
  # and .bazelrc are valid beyond Debian's 4.2.3. Loading fetches nothing of ours; that Bazel 7's
  # own WORKSPACE suffix loads without a download too was not verified (never run here).
  bazel-loads = pkgs.runCommand "vllm-backport-bazel-query" { nativeBuildInputs = [ bazel ]; } ''
    cp -r ${src} workspace && chmod -R u+w workspace && cd workspace
    export HOME="$TMPDIR"
    bazel --bazelrc=tools/bazel/bazel7.bazelrc query 'tests(//...)' > "$out"
  '';
}
