"""Stand-in for rules_java: @bazel_tools//tools/jdk loads these names; they are Bazel's native rules.

Nothing here builds Java; Bazel only needs the package to parse when it lists registered toolchains.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
