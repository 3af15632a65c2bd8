"""The GPU generations this project builds for, as data. The only place that knows them.

Everything per-SM (kernel shared objects, images, push targets, platforms, test gating) is
generated from SM_TABLE. Adding a generation is one row here.
"""

# capability: CUDA compute capability as an integer (major * 10 + minor).
# max_shared_memory: the most dynamic shared memory one block may opt into, in bytes.
# fp8_tensor_cores: mma on e4m3/e5m2 operands exists in hardware.
# triton_fp8e4nv: Triton accepts tl.float8e4nv values and pointers for this target.
SM_TABLE = {
    "sm80": struct(
        capability = 80,
        cards = ["A100"],
        max_shared_memory = 166912,
        fp8_tensor_cores = False,
        triton_fp8e4nv = False,
    ),
    "sm86": struct(
        capability = 86,
        cards = ["A6000", "RTX 3090"],
        max_shared_memory = 101376,
        fp8_tensor_cores = False,
        triton_fp8e4nv = False,
    ),
    "sm89": struct(
        capability = 89,
        cards = ["RTX 4090", "L40S"],
        max_shared_memory = 101376,
        fp8_tensor_cores = True,
        triton_fp8e4nv = True,
    ),
}

SMS = sorted(SM_TABLE.keys())

# The image that `latest` points at.
DEFAULT_SM = "sm86"

def sm_table_json():
    """SM_TABLE as a JSON string, for Python code that needs the same facts."""
    rows = {}
    for sm in SMS:
        row = SM_TABLE[sm]
        rows[sm] = {
            "capability": row.capability,
            "cards": row.cards,
            "max_shared_memory": row.max_shared_memory,
            "fp8_tensor_cores": row.fp8_tensor_cores,
            "triton_fp8e4nv": row.triton_fp8e4nv,
        }
    return json.encode(rows)

def _sm_table_file_impl(ctx):
    ctx.actions.write(ctx.outputs.out, sm_table_json() + "\n")

sm_table_file = rule(
    implementation = _sm_table_file_impl,
    doc = "Writes SM_TABLE as JSON (out) so Python tests and the runtime share the table.",
    attrs = {"out": attr.output(mandatory = True)},
)
