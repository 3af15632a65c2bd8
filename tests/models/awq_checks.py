"""What the AWQ checkpoint tests hold every packed checkpoint to: each quantised Linear is an INT4
g128 copy of the BF16 checkpoint's weight (models/awq.py quantised and dequantises it)."""

from models import awq


def packed_prefixes(packed_state):
    """The module names of a packed state's quantised Linears, sorted."""
    return sorted(k[: -len(".weight_packed")] for k in packed_state if k.endswith(".weight_packed"))


def unfaithful(bf16_state, packed_state):
    """The quantised Linears of packed_state that are not an INT4 g128 copy of bf16_state's weight
    (another shape, beyond rounding, or not quantised at all), each with what is wrong; [] when all are."""
    problems = []
    for prefix in packed_prefixes(packed_state):
        source, got = bf16_state[prefix + ".weight"], awq.dequantize(packed_state, prefix)
        if tuple(got.shape) != tuple(source.shape):
            problems.append(f"{prefix}: shape {tuple(got.shape)}, the BF16 weight's {tuple(source.shape)}")
            continue
        excess, largest = awq.rounding_excess(source, got)
        if excess > 0 or largest == 0:
            problems.append(f"{prefix}: {'beyond rounding by %g' % excess if excess > 0 else 'not quantised'}")
    return problems
