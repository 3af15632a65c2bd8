# Evaluates flake.nix's outputs offline: nixpkgs cannot be fetched here, so a small stand-in package
# set records which packages the shell asks for. Everything else is the real flake code.
let
  flake = import ../../flake.nix;
  named = name: { inherit name; };
  python = named "python311" // { pkgs.pip = named "pip"; };
  standIn = {
    mkShell = attrs: attrs;
    bazel_7 = named "bazel_7";
    python311 = python;
    gcc = named "gcc";
    git = named "git";
    unzip = named "unzip";
  };
  shell = (flake.outputs { self = { }; nixpkgs.legacyPackages.x86_64-linux = standIn; })
    .devShells.x86_64-linux.default;
in {
  env = shell.env;
  packages = map (p: p.name) shell.packages;
}
