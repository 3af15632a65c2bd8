#!/usr/bin/env bash
# Builds one image target in two fresh Bazel output bases and compares the manifest digests.
#   tools/bench/reproduce_digest.sh [//tests/images:test_image_sm86] [SCRATCH_DIR]
# Each output base fetches its own inputs (debs, wheels, nvcc), so this checks that nothing of
# one build's machine state leaks into the digest. Exit 0 only when both digests are equal.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target="${1:-//tests/images:test_image_sm86}"
scratch="${2:-$(mktemp -d)}"
package="${target#//}"; package="${package%%:*}"; name="${target##*:}"
digests=()
for run in a b; do
  base="$scratch/output_base_$run"
  start=$(date +%s)
  (cd "$repo" && ./bazelw --output_base="$base" build --symlink_prefix=/ "$target" >"$scratch/build_$run.log" 2>&1) ||
    { tail -30 "$scratch/build_$run.log"; exit 1; }
  bin="$(cd "$repo" && ./bazelw --output_base="$base" info bazel-bin 2>/dev/null)"
  digests+=("$(cat "$bin/$package/$name/digest")")
  echo "output base $run: ${digests[-1]} ($(( $(date +%s) - start )) s)"
  (cd "$repo" && ./bazelw --output_base="$base" shutdown >/dev/null 2>&1) || true
done
if [ "${digests[0]}" != "${digests[1]}" ]; then
  echo "DIFFERENT digests for $target" >&2
  exit 1
fi
echo "same digest in two output bases: ${digests[0]}"
