"""GPU runner platforms and test gating, generated from the SM table.

A GPU runner selects its generation with `--config=sm86` (see .bazelrc), which sets the target
platform to //tools/platforms:sm86. A test made with gpu_py_test(sms = [...]) is compatible only
with those platforms: everywhere else Bazel reports it SKIPPED instead of running or failing it.
"""

load("//tools/bazel:sm.bzl", "SMS")

def gpu_platforms():
    """Declares the constraint, one value and one runner platform per SM. Call once, in tools/platforms."""
    native.constraint_setting(name = "gpu")
    native.constraint_setting(name = "never")

    # No platform carries this value: a target that requires it can never run.
    native.constraint_value(name = "incompatible", constraint_setting = ":never")
    for sm in SMS:
        native.constraint_value(name = sm, constraint_setting = ":gpu")
        native.platform(
            name = sm + "_runner",
            parents = ["@local_config_platform//:host"],
            constraint_values = [":" + sm],
        )

def gpu_compatible_with(sms):
    """target_compatible_with for a target that needs one of the GPU generations in sms."""
    for sm in sms:
        if sm not in SMS:
            fail("unknown GPU generation %r; the SM table (tools/bazel/sm.bzl) has %s" % (sm, SMS))
    choices = {"//tools/platforms:" + sm: [] for sm in sms}
    choices["//conditions:default"] = ["//tools/platforms:incompatible"]
    return select(choices)

def gpu_py_test(name, sms = SMS, tags = [], **kwargs):
    """A py_test that needs a GPU of one of the generations in sms (default: all of them).

    Args:
      name: test name.
      sms: the generations it is valid for, e.g. ["sm80", "sm86"].
      tags: extra tags; "gpu" and the SM names are added.
      **kwargs: passed to py_test.
    """
    native.py_test(
        name = name,
        tags = tags + ["gpu"] + sms,
        target_compatible_with = gpu_compatible_with(sms),
        **kwargs
    )
