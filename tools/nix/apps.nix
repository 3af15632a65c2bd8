# `nix run .#<name>`: the repository's Bazel entry points with the shell's tools and environment.
# They run in the checkout you call them from, not the flake's read-only store copy, because Bazel
# writes its convenience links and dist/ into the workspace.
#
#   nix run .#sm86-push [-- --repository HOST/NAME]   ./bazelw run //images:sm86_push (one per SM)
#   nix run .#test                                     .ci/run (./bazelw test //... with counts)
{ pkgs, sms, runtimeInputs, env }:
let
  commands = builtins.listToAttrs (map
    (sm: { name = "${sm}-push"; value = "./bazelw run //images:${sm}_push --"; })
    sms) // {
    test = "bash .ci/run";
  };

  exports = builtins.concatStringsSep "\n"
    (map (name: "export ${name}='${env.${name}}'") (builtins.attrNames env));

  app = name: command: {
    type = "app";
    program = "${pkgs.writeShellApplication {
      inherit name runtimeInputs;
      text = ''
        root="$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
        if [ ! -x "$root/bazelw" ] || [ ! -f "$root/WORKSPACE" ]; then
          echo "${name}: run this from inside a vLLM Backport checkout" >&2
          exit 1
        fi
        cd "$root"
        ${exports}
        exec ${command} "$@"
      '';
    }}/bin/${name}";
  };
in
{
  inherit commands;
  apps = builtins.mapAttrs app commands;
}
