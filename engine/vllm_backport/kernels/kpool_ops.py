"""GLM-5.3's indexer key-pool ops for sm80/86/89, with the arguments and return values of the
upstream functions they replace:

| here | replaces (vLLM 0.32.0) |
|---|---|
| kpool_compress_and_write_cache | vllm.models.glm5next.nvidia.ops.kpool_compress.kpool_compress_and_write_cache |
| kpool_decode_update_and_maybe_write_cache_batched | ...kpool_compress.kpool_decode_update_and_maybe_write_cache_batched |

Upstream's kernels store through e4m3 pointers, which Triton cannot compile for sm80/86; these write
the same bytes with the integer e4m3 codec (triton/kpool.py). Bad input raises ValueError naming
the problem and the fix, where upstream asserts. Two deliberate differences: head_dim must be 128
(the Hadamard's width; upstream asserts nothing and would mis-rotate another), and a pool whose
slot is negative is not stored (upstream would store it below the cache).
"""

import os

import torch

from vllm_backport import target

from . import kpool_specs as specs
from .indexer_specs import ptr
from .launch import launch, spec_cache
from .loader import ensure_loaded

INDEX_HEAD_DIM = specs.HEAD_DIM
_compress_spec = spec_cache(specs.compress_spec)
_decode_spec = spec_cache(specs.decode_spec)
_INTS = (torch.int32, torch.int64)
_SCORES = (torch.bfloat16, torch.float16, torch.float32)


def _fail(msg):
    raise ValueError(msg)


def _run(spec, grid, positional):
    names = spec["fn"].arg_names
    launch(spec, grid, list(positional) + [spec["constexprs"][n] for n in names[len(positional):]])


def _names(dtypes):
    return "/".join(str(d).replace("torch.", "") for d in dtypes)


def _tensor(name, t, shape, dtypes, device=None):
    """Checks a tensor's type, shape (None: any size there) and device; returns it with a contiguous
    last dim (as upstream's .contiguous() calls)."""
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != len(shape) or any(s is not None and s != have for s, have in zip(shape, t.shape)):
        want = ", ".join("*" if s is None else str(s) for s in shape)
        _fail(f"{name} must have shape [{want}], got {tuple(t.shape)}")
    if t.dtype not in dtypes:
        _fail(f"{name} must be {_names(dtypes)}, got {t.dtype}; convert it with .to({dtypes[0]})")
    if device is not None and t.device != device:
        _fail(f"{name} is on {t.device} but the keys are on {device}; move it with .to({str(device)!r})")
    if t.numel() and t.stride(-1) != 1:
        t = t.contiguous()
    return t


def _device_ok(t):
    if t.device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET", "0") != "1":
            _fail("the key-pool kernels run on CPU tensors only under Triton's interpreter: set TRITON_INTERPRET=1 "
                  "before importing triton, or move the tensors to an sm80/86/89 GPU")
    elif t.device.type != "cuda":
        _fail(f"the key-pool kernels run on CUDA GPUs (sm80/86/89), got device {t.device}")


def _head_dim(head_dim):
    if head_dim != INDEX_HEAD_DIM:
        _fail(f"head_dim must be {INDEX_HEAD_DIM} (GLM-5.3's indexer head, the Hadamard's width), got {head_dim}")


def _cache(kv_cache, head_dim, device):
    """uint8 [blocks, page_size, (1,) head_dim + 4] -> (cache, page_size, page stride in bytes)."""
    if not isinstance(kv_cache, torch.Tensor):
        _fail(f"kv_cache must be a torch.Tensor, got {type(kv_cache).__name__}")
    row = head_dim + 4
    if (kv_cache.dtype != torch.uint8 or kv_cache.dim() not in (3, 4) or kv_cache.shape[-1] != row
            or (kv_cache.dim() == 4 and kv_cache.shape[2] != 1)):
        _fail(f"kv_cache must be the indexer K cache: uint8 [num_blocks, block_size, {row}] ({head_dim} e4m3 codes "
              f"then a float32 scale per entry), got {kv_cache.dtype} {tuple(kv_cache.shape)}")
    if kv_cache.device != device:
        _fail(f"kv_cache is on {kv_cache.device} but the keys are on {device}; move it with .to({str(device)!r})")
    page_size, stride = kv_cache.shape[1], kv_cache.stride(0)
    if kv_cache.shape[0] > 1 and (stride < page_size * row or stride % 4):
        _fail(f"kv_cache's page stride {stride} must be a multiple of 4 and at least block_size * {row}; pass the "
              "cache as allocated (block_size rows of codes, then block_size float32 scales, per page)")
    return kv_cache, page_size, stride


def _conf(t, conf):
    ensure_loaded(t)
    return conf or specs.CONFIGS.shared(target.sm_for(t.device))


def kpool_compress_and_write_cache(kv_cache, slot_k, slot_score, ape, loc, pool_size, head_dim=INDEX_HEAD_DIM,
                                   write_mask=None, round_scale=True, return_compressed=False, write_cache=True,
                                   *, conf=None):
    """Compresses each pool of pool_size keys into one e4m3 entry; writes it at loc and/or returns it.

    kv_cache uint8 [num_blocks, block_size, head_dim + 4]; slot_k bf16 [n_pools, pool_size, head_dim]
    raw keys; slot_score [n_pools, pool_size, head_dim] gate scores (bf16, fp16 or fp32); ape float32
    [pool_size, head_dim]; loc int64 [n_pools] cache slots; write_mask bool [n_pools] or None (all);
    round_scale: power-of-two scales. Per pool: softmax over the pool of score + ape per channel,
    the weighted sum of keys (bf16), Hadamard-128 (bf16), scale from the absmax, e4m3 codes.
    Returns (codes float8_e4m3fn [n_pools, head_dim], scales float32 [n_pools]) with
    return_compressed (not with a write_mask), else None. conf (tests): a kpool_specs row.
    """
    if not (write_cache or return_compressed):
        _fail("nothing to do: pass write_cache=True, return_compressed=True or both")
    _head_dim(head_dim)
    slot_k = _tensor("slot_k", slot_k, (None, pool_size, head_dim), (torch.bfloat16,))
    dev = slot_k.device
    _device_ok(slot_k)
    n = slot_k.shape[0]
    slot_score = _tensor("slot_score", slot_score, tuple(slot_k.shape), _SCORES, dev)
    ape = _tensor("ape", ape, (pool_size, head_dim), (torch.float32,), dev)
    loc = _tensor("loc", loc, (n,), _INTS, dev)
    cache, page_size, page_stride = _cache(kv_cache, head_dim, dev)
    if write_mask is not None:
        if return_compressed:
            _fail("write_mask cannot be combined with return_compressed=True (upstream's contract): masked pools "
                  "have no compressed output; drop one of them")
        write_mask = _tensor("write_mask", write_mask, (n,), (torch.bool,), dev)
    out_k = torch.empty((n, head_dim), dtype=torch.float8_e4m3fn, device=dev) if return_compressed else None
    out_s = torch.empty((n,), dtype=torch.float32, device=dev) if return_compressed else None
    if n:
        conf = _conf(slot_k, conf)
        spec = _compress_spec(conf, ptr(slot_score), ptr(loc), pool_size, bool(round_scale), write_mask is not None,
                              bool(write_cache), bool(return_compressed), head_dim)
        mask = write_mask.view(torch.uint8) if write_mask is not None else cache  # unread without a mask
        outs = [out_k.view(torch.uint8), out_s] if return_compressed else [cache, ape]  # unread without outputs
        _run(spec, (n,), [slot_k, slot_k.stride(0), slot_k.stride(1), slot_score, slot_score.stride(0),
                          slot_score.stride(1), ape, ape.stride(0), loc, mask, cache, page_stride, page_size] + outs)
    return (out_k, out_s) if return_compressed else None


def kpool_decode_update_and_maybe_write_cache_batched(kv_cache, tail_kv_cache, tail_slot_mapping, key, slot_score, ape,
                                                      slot_mapping, positions, pool_size, head_dim=INDEX_HEAD_DIM,
                                                      round_scale=True, *, conf=None):
    """One decode (or speculative-verify) step of the key pools, in place; returns None.

    kv_cache uint8 [num_blocks, block_size, head_dim + 4]; tail_kv_cache bf16 [blocks, 2, ring,
    head_dim] (keys, then gate scores; ring a multiple of pool_size); key, slot_score bf16
    [num_requests, next_n, head_dim]; ape float32 [pool_size, head_dim]; tail_slot_mapping,
    slot_mapping, positions int32/int64 [num_requests, next_n] (ring slot block * ring + pos % ring,
    pool-granular cache slot or -1, position or -1). Each request's tokens in order: a token at
    position p with p % pool_size == pool_size - 1 and a cache slot closes its pool (ring rows
    p - pool_size + 1 .. p - 1 and itself) into the cache; then a token with p >= 0 and a ring slot
    is stashed in ring row p % ring. conf (tests): a kpool_specs row.
    """
    if not isinstance(key, torch.Tensor) or key.dim() != 3:
        _fail(f"key must be a [num_requests, next_n, head_dim] tensor, got {getattr(key, 'shape', type(key).__name__)}")
    b, next_n = key.shape[0], key.shape[1]
    if b == 0 or next_n == 0:
        return None
    _head_dim(head_dim)
    key = _tensor("key", key, (b, next_n, head_dim), (torch.bfloat16,))
    dev = key.device
    _device_ok(key)
    slot_score = _tensor("slot_score", slot_score, (b, next_n, head_dim), (torch.bfloat16,), dev)
    ape = _tensor("ape", ape, (pool_size, head_dim), (torch.float32,), dev)
    tail = _tensor("tail_kv_cache", tail_kv_cache, (None, 2, None, head_dim), (torch.bfloat16,), dev)
    if tail is not tail_kv_cache or tail.stride(2) != head_dim:
        _fail(f"tail_kv_cache must have contiguous {head_dim}-wide rows (strides (*, *, {head_dim}, 1)), got strides "
              f"{tail_kv_cache.stride()}; pass the tail cache as allocated")
    ring = tail.shape[2]
    if ring < pool_size or ring % pool_size:
        _fail(f"the tail ring length {ring} (tail_kv_cache.shape[2]) must be a multiple of pool_size {pool_size}")
    ints = [_tensor(name, t, (b, next_n), _INTS, dev).contiguous()
            for name, t in (("slot_mapping", slot_mapping), ("positions", positions),
                            ("tail_slot_mapping", tail_slot_mapping))]
    cache, page_size, page_stride = _cache(kv_cache, head_dim, dev)
    conf = _conf(key, conf)
    spec = _decode_spec(conf, *(ptr(t) for t in ints), pool_size, bool(round_scale), head_dim)
    loc, pos, tslot = ints
    _run(spec, (b,), [cache, page_stride, page_size, tail, tail.stride(0), tail.stride(1), ring, tslot, key,
                      key.stride(0), key.stride(1), slot_score, slot_score.stride(0), slot_score.stride(1), ape,
                      ape.stride(0), loc, pos, next_n])
    return None


__all__ = ["kpool_compress_and_write_cache", "kpool_decode_update_and_maybe_write_cache_batched", "INDEX_HEAD_DIM"]
