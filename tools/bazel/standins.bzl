"""Offline stand-ins for repositories that Bazel 4.2.3's default WORKSPACE suffix would download.

Only Debian's Bazel 4.2.3 gets them (it reports an empty native.bazel_version): it must build with
no network. Newer Bazel (7, in `nix develop`) declares its own, newer versions of these repositories;
the 4.2.3-era stand-ins would shadow them and break its Java and C++ toolchain packages.
"""

_STANDINS = ["remote_coverage_tools", "rules_java", "rules_cc"]

def needs_standins(bazel_version):
    """True for Debian's bootstrap build ("") and any 4.x release."""
    return bazel_version == "" or bazel_version.startswith("4.")

def offline_standins():
    """Declares the stand-ins (tools/bazel/standins/<name>) when this Bazel needs them. Call from WORKSPACE."""
    if not needs_standins(native.bazel_version):
        return
    for name in _STANDINS:
        native.local_repository(
            name = name,
            path = "tools/bazel/standins/" + name,
        )
