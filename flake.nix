{
  description = "vLLM Backport build shell: Bazel, the pinned Python, CUDA compiler and NCCL";

  # nixpkgs release 25.11, locked by revision and narHash in flake.lock.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/25.11";

  outputs = { self, nixpkgs }:
    let
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      lib = import ./tools/nix/lib.nix;
      pins = lib.readPins ./tools/pins/toolchains.json;
      sms = lib.smNames (builtins.readFile ./tools/bazel/sm.bzl);
      toolchains = import ./tools/nix/toolchains.nix { inherit pkgs lib pins; };
      python = pkgs.${lib.pythonAttr pins};

      # The image tests start a local OCI registry under Debian's command name.
      dockerRegistry = pkgs.writeShellScriptBin "docker-registry" ''
        exec ${pkgs.docker-distribution}/bin/registry "$@"
      '';

      tools = [
        pkgs.bazel_7
        python
        python.pkgs.pip
        pkgs.gcc
        pkgs.git
        pkgs.unzip
        pkgs.dpkg
        pkgs.skopeo
        dockerRegistry
        toolchains.cuda
      ];

      # VLLM_BACKPORT_LOCAL_CUDA makes Bazel's cuda_toolchain use this compiler instead of
      # fetching the wheels again (tools/bazel/cuda/local_cuda.py checks it against the pins first).
      env = lib.shellEnv pins // { VLLM_BACKPORT_LOCAL_CUDA = "${toolchains.cuda}"; };

      # Evaluation stops here when the fetched compiler or NCCL is not the pinned version.
      pinned = lib.requirePinnedToolchains pins {
        nvcc = toolchains.cuda.version;
        nccl = toolchains.nccl.version;
      };

      apps = import ./tools/nix/apps.nix { inherit pkgs sms env; runtimeInputs = tools; };
    in
    {
      packages.${system} = pinned { inherit (toolchains) cuda nccl; };

      devShells.${system}.default = pinned (pkgs.mkShell {
        packages = tools;
        buildInputs = [ toolchains.nccl ];
        inherit env;
        shellHook = ''
          echo "vLLM Backport shell: Python $VLLM_BACKPORT_PYTHON, nvcc $VLLM_BACKPORT_NVCC, NCCL $VLLM_BACKPORT_NCCL, vLLM $VLLM_BACKPORT_VLLM (pins: tools/pins/toolchains.json); build with ./bazelw"
        '';
      });

      apps.${system} = pinned apps.apps;

      checks.${system} = pinned (import ./tools/nix/checks.nix {
        inherit pkgs lib pins toolchains;
        bazel = pkgs.bazel_7;
        src = self;
      });
    };
}
