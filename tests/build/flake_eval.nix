# Evaluates flake.nix's outputs offline: nixpkgs cannot be fetched here, so a small stand-in package
# set records what the flake asks for (packages by name, derivations as their arguments). Everything
# else is the real flake code, the pin check included: it throws here exactly as under `nix develop`.
let
  flake = import ../../flake.nix;
  named = name: { inherit name; outPath = "/standin/${name}"; };
  derivation = attrs: attrs // { name = attrs.pname or attrs.name; outPath = "/standin/${attrs.pname or attrs.name}"; };
  python = named "python311" // { pkgs.pip = named "pip"; };
  standIn = {
    mkShell = attrs: attrs;
    stdenv = { mkDerivation = derivation; cc.cc.lib = named "libstdc++"; };
    fetchPypi = args: derivation (args // { name = "${args.pname}-${args.version}.whl"; });
    writeShellApplication = derivation;
    writeShellScriptBin = name: text: named name // { inherit text; };
    runCommand = name: env: script: derivation { inherit name script; };
    python311 = python;
  } // builtins.listToAttrs (map (name: { inherit name; value = named name; }) [
    "autoPatchelfHook" "bazel_7" "docker-distribution" "dpkg" "gcc" "git" "skopeo" "unzip" "zlib"
  ]);
  outputs = flake.outputs {
    self = named "source";
    nixpkgs.legacyPackages.x86_64-linux = standIn;
  };
  system = "x86_64-linux";
  shell = outputs.devShells.${system}.default;
  toolchain = drv: {
    inherit (drv) version manifest;
    wheels = map (src: { inherit (src) pname version dist python abi platform format sha256; }) drv.srcs;
  };
  lib = import ../../tools/nix/lib.nix;
  sms = lib.smNames (builtins.readFile ../../tools/bazel/sm.bzl);
  # The commands behind the apps (the flake only exposes their store paths).
  commands = (import ../../tools/nix/apps.nix { pkgs = standIn; inherit sms; runtimeInputs = [ ]; env = { }; }).commands;
in
{
  inherit (shell) env;
  packages = map (p: p.name) shell.packages;
  buildInputs = map (p: p.name) shell.buildInputs;
  toolchains = builtins.mapAttrs (name: toolchain) outputs.packages.${system};
  apps = builtins.mapAttrs (name: app: app.program) outputs.apps.${system};
  checks = builtins.attrNames outputs.checks.${system};
  inherit sms commands;
}
