"""Build-time check that upstream vLLM's Triton kernels on a supported model's path fit an SM:
compiles each launch spec for the SM (Triton's AOT compiler, no GPU) and fails, naming kernel,
config and bytes, when one needs more shared memory than the SM row allows or a type the SM lacks.
Writes one line per spec: shared bytes, limit, key.

Kernel families covered: Qwen4Exp QSA sparse attention (upstream_qsa.py). The configs are the ones
vLLM selects with the platform reporting the SM's capability.

usage: upstream_fit.py --sm sm86 --table sm_table.json --out fit_sm86.txt
"""

import argparse
import json
import os
import sys
import tempfile


def report(sm, row):
    """[(shared bytes, key)] for every spec; raises compile_sm.SpecError listing every failure."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    from kernels.aot import compile_sm, upstream_qsa
    from vllm_backport.kernels.specs import spec_key

    capability = divmod(row["capability"], 10)
    # vLLM's tuning tables key on the platform's capability; answer as this SM for the selection.
    type(current_platform).get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(*capability))
    lines, errors = [], []
    for spec in upstream_qsa.specs(capability, fp8_caches=row["triton_fp8e4nv"]):
        try:
            compiled = compile_sm.compile_triton(spec, sm, row)
            lines.append((compiled.metadata.shared, spec_key(spec)))
        except compile_sm.SpecError as e:
            errors.append(str(e))
    if errors:
        raise compile_sm.SpecError("\n".join(errors))
    return sorted(set(lines), key=lambda line: line[1])


def main():
    from kernels.aot import compile_sm

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sm", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_fit_")
    with open(a.table) as f:
        row = json.load(f)[a.sm]
    try:
        lines = report(a.sm, row)
    except compile_sm.SpecError as e:
        sys.exit("upstream Triton kernels do not fit %s:\n%s" % (a.sm, e))
    with open(a.out, "w") as f:
        f.writelines("%d %d %s\n" % (shared, row["max_shared_memory"], key) for shared, key in lines)


if __name__ == "__main__":
    main()
