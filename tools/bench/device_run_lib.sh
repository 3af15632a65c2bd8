# Shared by the device-call scripts (sourced, not run, after they set $out): sets $repo and
# PYTHONPATH, checks VLLM_BACKPORT_SM_TABLE, creates $out; `run NAME COMMAND...` runs the command
# with its output in $out/NAME.log, appends "PASS|FAIL NAME SECONDS" to $out/summary.txt and sets
# status=1 on a failure, so one call runs every step and still reports what failed.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH=$repo:$repo/engine
: "${VLLM_BACKPORT_SM_TABLE:?set VLLM_BACKPORT_SM_TABLE to the built sm_table.json (bazel-bin/kernels/sm_table.json)}"
mkdir -p "$out"
status=0
run() {
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
  echo "$r $name $((SECONDS - t0))s" | tee -a "$out/summary.txt"
}
