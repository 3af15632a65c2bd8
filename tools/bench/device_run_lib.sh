# Shared by the device-call scripts (sourced, not run): `run NAME COMMAND...` runs the command with
# its output in $out/NAME.log, appends "PASS|FAIL NAME SECONDS" to $out/summary.txt and sets
# status=1 on a failure, so one call runs every step and still reports what failed.
status=0
run() {
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
  echo "$r $name $((SECONDS - t0))s" | tee -a "$out/summary.txt"
}
