#!/usr/bin/env bash
# On the GPU check machine, from the carried working tree (tools/device/README.md):
#   bash tools/device/check.sh CARRIED_FOLDER [gpu_serve.py arguments]
# stages the parts carried in CARRIED_FOLDER; once the bundle is whole, runs the GPU end-to-end test
# with the given arguments and packs its records into $OUT/gpu_serve.tgz (a device call returns
# at most 8 files). Exit status: stage.py's while parts are missing (3), else the test's.
set -uo pipefail
carried=${1:?usage: check.sh CARRIED_FOLDER [gpu_serve.py arguments]}
shift
python3 tools/device/stage.py --carried "$carried" || exit $?
source /tmp/vllm-backport/env.sh
[ $# -gt 0 ] || exit 0
records=$(mktemp -d)
python3 tests/engine/gpu_serve.py --models "$VLLM_BACKPORT_MODELS" --references /tmp/vllm-backport/references \
  --out "$records" --workdir /tmp "$@"
status=$?
tar -czf "${OUT:-.}/gpu_serve.tgz" -C "$records" .
exit $status
