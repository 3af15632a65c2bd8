{
  description = "vLLM Backport build shell: Bazel, the pinned Python, host compilers";

  # nixpkgs release 25.11. The CUDA compiler and NCCL are deliberately not taken from nixpkgs:
  # Bazel fetches the exact wheels pinned in tools/pins/toolchains.json, inside and outside Nix.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/25.11";

  outputs = { self, nixpkgs }:
    let
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      lib = import ./tools/nix/lib.nix;
      pins = lib.readPins ./tools/pins/toolchains.json;
      python = pkgs.${lib.pythonAttr pins};
    in {
      devShells.${system}.default = pkgs.mkShell {
        packages = [
          pkgs.bazel_7
          python
          python.pkgs.pip
          pkgs.gcc
          pkgs.git
          pkgs.unzip
        ];
        env = lib.shellEnv pins;
        shellHook = ''
          echo "vLLM Backport shell: Python $VLLM_BACKPORT_PYTHON, nvcc $VLLM_BACKPORT_NVCC, NCCL $VLLM_BACKPORT_NCCL, vLLM $VLLM_BACKPORT_VLLM (pins: tools/pins/toolchains.json)"
        '';
      };
    };
}
