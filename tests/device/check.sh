#!/usr/bin/env bash
# On the GPU check machine, from the carried working tree (tests/device/README.md):
#   bash tests/device/check.sh CARRIED_FOLDER [gpu_serve.py arguments]
# stages the parts carried in CARRIED_FOLDER; once the bundle is whole, runs the GPU end-to-end test
# with the given arguments; its records are packed into $OUT/gpu_serve.tgz after every job (a device
# call returns at most 8 files, and keeps $OUT when it is stopped at its limit). Give the test a
# --time-limit under the call's. Exit status: stage.py's while parts are missing (3), else the test's.
set -uo pipefail
carried=${1:?usage: check.sh CARRIED_FOLDER [gpu_serve.py arguments]}
shift
# The working tree's plugin Python over the bundle's: a plugin fix needs no new bundle.
python3 tests/device/stage.py --carried "$carried" --plugin-sources engine/vllm_backport || exit $?
source /tmp/vllm-backport/env.sh
[ $# -gt 0 ] || exit 0
python3 tests/engine/gpu_serve.py --models "$VLLM_BACKPORT_MODELS" --references /tmp/vllm-backport/references \
  --out "$(mktemp -d)" --archive "${OUT:-.}/gpu_serve.tgz" --workdir /tmp "$@"
