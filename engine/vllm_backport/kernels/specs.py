"""Every Triton specialisation the engine launches, as data.

The per-SM AOT step (kernels/aot/compile_sm.py) compiles exactly these for each SM of the table and
packs the cubins into that SM's shared object; at run time launch.py looks a launch up by the same
key and falls back to Triton's JIT for anything not listed. A new kernel or config is one entry.
"""

from .triton import fp8_ds_mla

# Launch config of the fp8_ds_mla kernels: 8 tokens per program (one [8, 8, 64] tile). The gather
# runs 2 warps (fastest of a BLOCK_T x warps sweep on the H200, tools/bench/RESULTS.md), the insert 4.
FP8_DS_MLA_BLOCK_T = 8
FP8_DS_MLA_GATHER_WARPS = 2
FP8_DS_MLA_INSERT_WARPS = 4


def _gather(idx_type):
    return dict(
        fn=fp8_ds_mla.dequant_gather_fp8_ds_mla_kernel,
        signature={
            "cache_ptr": "*u8",
            "idx_ptr": idx_type,
            "out_ptr": "*bf16",
            "n": "i32",
            "block_size": "i32",
            "page_stride": "i64",
            "BLOCK_T": "constexpr",
        },
        constexprs={"BLOCK_T": FP8_DS_MLA_BLOCK_T},
        aligned16=["cache_ptr", "idx_ptr", "out_ptr", "page_stride"],
        num_warps=FP8_DS_MLA_GATHER_WARPS,
        num_stages=1,
    )


def _insert(idx_type):
    return dict(
        fn=fp8_ds_mla.quant_insert_fp8_ds_mla_kernel,
        signature={
            "rows_ptr": "*bf16",
            "slot_ptr": idx_type,
            "cache_ptr": "*u8",
            "n": "i32",
            "block_size": "i32",
            "page_stride": "i64",
            "BLOCK_T": "constexpr",
        },
        constexprs={"BLOCK_T": FP8_DS_MLA_BLOCK_T},
        aligned16=["rows_ptr", "slot_ptr", "cache_ptr", "page_stride"],
        num_warps=FP8_DS_MLA_INSERT_WARPS,
        num_stages=1,
    )


# The prefill gather of paged requests (upstream's dequantize_and_gather_k_cache): BLOCK_T tokens
# per step, FP8_DS_MLA_PAGED_WORKERS programs per request looping over its rows (a grid that does
# not depend on the lengths, which stay on the device).
FP8_DS_MLA_PAGED_WORKERS = 128


def _paged_gather(has_gather_lens):
    return dict(
        fn=fp8_ds_mla.dequant_gather_paged_kernel,
        signature={
            "out_ptr": "*bf16", "out_stride0": "i64", "out_stride1": "i64",
            "cache_ptr": "*u8", "page_stride": "i64",
            "seq_lens_ptr": "*i32", "gather_lens_ptr": "*i32",
            "block_table_ptr": "*i32", "bt_stride": "i64", "block_size": "i32", "offset": "i32",
            "BLOCK_T": "constexpr", "HAS_GATHER_LENS": "constexpr",
        },
        constexprs={"BLOCK_T": FP8_DS_MLA_BLOCK_T, "HAS_GATHER_LENS": has_gather_lens},
        aligned16=["out_ptr", "cache_ptr", "page_stride", "seq_lens_ptr", "gather_lens_ptr", "block_table_ptr"],
        num_warps=FP8_DS_MLA_GATHER_WARPS,
        num_stages=1,
    )


# Sparse-attention top-k indices are int32, slot mappings int64: both are launched.
SPECIALISATIONS = [_gather("*i32"), _gather("*i64"), _insert("*i32"), _insert("*i64"),
                   _paged_gather(True), _paged_gather(False)]


def for_sm(sm, sm_row):
    """Every specialisation the engine launches on one SM (its name and SM table row): this file's
    list plus each kernel family's own per-SM set, filtered by their "sms" tags. The AOT step packs
    exactly these into that SM's .so."""
    from . import (compressor_specs, fp8_linear_specs, fwht_quant_specs, indexer_specs, kpool_specs, mhc_specs,
                   o_proj_specs, sparse_mla_specs)

    out = SPECIALISATIONS + sparse_mla_specs.specialisations(sm, sm_row)
    for family in (compressor_specs, o_proj_specs, fp8_linear_specs, mhc_specs, indexer_specs, fwht_quant_specs,
                   kpool_specs):
        out += family.specialisations(sm, sm_row)
    unique = {}
    for spec in out:
        if sm in spec.get("sms", [sm]):
            unique.setdefault(spec_key(spec), spec)
    return [unique[k] for k in sorted(unique)]


def attrs(spec):
    """Triton's compile attributes for the spec: 16-byte divisibility of the aligned16 arguments,
    as the JIT assumes for aligned pointers and multiples of 16 (so AOT code vectorises the same)."""
    names = spec["fn"].arg_names
    return {(names.index(n),): [["tt.divisibility", 16]] for n in spec.get("aligned16", [])}


def args_fit(spec, args):
    """Whether launch arguments meet the spec's alignment promises (else the JIT must run it)."""
    names = spec["fn"].arg_names
    for n in spec.get("aligned16", []):
        a = args[names.index(n)]
        value = a.data_ptr() if hasattr(a, "data_ptr") else a
        if value % 16:
            return False
    return True


def lookup(fn, **types):
    """The listed specialisation of fn whose signature has these argument types."""
    for spec in SPECIALISATIONS:
        if spec["fn"] is fn and all(spec["signature"][k] == v for k, v in types.items()):
            return spec
    raise KeyError("no specialisation of %s with %s in vllm_backport/kernels/specs.py" % (fn.__name__, types))


def spec_key(spec):
    """Stable text key of a specialisation: kernel name, argument types, constexprs, warps, stages."""
    sig = ",".join("%s:%s" % kv for kv in spec["signature"].items())
    consts = ",".join("%s=%r" % kv for kv in sorted(spec["constexprs"].items()))
    aligned = ",".join(spec.get("aligned16", []))
    return "%s(%s)[%s]{16:%s}w%d.s%d" % (spec["fn"].__name__, sig, consts, aligned, spec["num_warps"], spec["num_stages"])
