"""Host path of the CUDA sparse MLA kernels: the fused decode (kernels/csrc/sparse_mla_decode_kernel.cu)
and the prefill (sparse_mla_prefill_kernel.cu, one op call: the checks are in C++).

vLLM calls the decode eagerly once per layer and step wherever CUDA graphs do not cover it, so
the host cost of one call counts as much as the kernel's. sparse_mla_ops checks a call's
arguments in full the first time it meets their layout (the shapes, strides and flags a plan
depends on) and stores what it decided here as a DecodePlan; a later call with the same layout is
one op call, which checks every tensor it touches in C++, allocates lse and the split buffers (and
the output when the caller passes none), and launches the kernel (an eager call with 4-16 splits:
one cooperative launch whose blocks merge the splits themselves; a call recorded into a CUDA graph,
or with 2-3 splits: a merge kernel after it); a layout whose last wave would hold only a few blocks makes two op calls (tail_launch). A
call the op refuses (say, a q off the kernel's alignment) goes back through
the checked path, which sends it to Triton or names the problem.
"""

import dataclasses
import functools

import torch

from .launch import sm_count

CUDA_BLOCK_H = 64  # query heads per block of the CUDA kernel
SPLIT_CHOICES = (1, 2, 3, 4, 8, 16)  # the split counts the CUDA merge is compiled for
TILE_SLOTS = 32  # listed slots per step of the kernel: a split gets at least one tile


def available():
    return hasattr(torch.ops.vllm_backport, "sparse_mla_decode_fp8_alloc")


def aligned(q, out, cache, page_stride, xcache, xpage):
    """The kernel's alignment: 16 bytes for q and out rows and cache pages."""
    return all(v % 16 == 0 for v in (q.data_ptr(), cache.data_ptr(), xcache.data_ptr(), page_stride, xpage,
                                     2 * q.stride(0), 2 * q.stride(1), 2 * q.stride(2), out.data_ptr(),
                                     2 * out.stride(0), 2 * out.stride(1), 2 * out.stride(2)))


def splits_for(device, tokens, heads, width):
    """One block per SM (253 registers, 98.7 KB of shared memory): split each token's slot list
    while all blocks still fit in one wave of this card's SMs, keeping a tile per split."""
    return _splits(sm_count(device), tokens * -(-heads // CUDA_BLOCK_H), width)


def _splits(sms, blocks, width):
    fit = min(sms // blocks, -(-width // TILE_SLOTS))
    return max(s for s in SPLIT_CHOICES if s <= max(1, fit))


def tail_launch(sms, batch, s_q, heads, width):
    """(requests, splits) of a second launch, or None. Past one wave of unsplit blocks, the
    requests that fill whole waves run in one launch and the rest, when they are under half a wave,
    in a second one with their lists split: a last wave of a few 20-step blocks would otherwise
    cost as much as a full one (on an H200: 128 heads, batch 66 -> 67, 58.4 -> 110.1 us)."""
    per_request = s_q * -(-heads // CUDA_BLOCK_H)
    blocks = batch * per_request
    if blocks <= sms:
        return None
    full = blocks // sms * sms // per_request  # requests whose blocks fill whole waves
    if full in (0, batch):  # no whole wave, or nothing past them
        return None
    splits = _splits(sms, (batch - full) * per_request, width)
    return (batch - full, splits) if splits > 1 else None


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """What one layout of flash_mla_with_kvcache decided: the op's scalar arguments."""

    device_index: int
    splits: int
    has_sink: bool
    extra_width: int
    scale_log2: float
    tail: tuple | None = None  # tail_launch's (requests, splits): the last requests run in a second launch

    def run(self, q, cache, indices, lengths, xcache, xidx, xlengths, sink, out):
        """(out, lse) of the call; lengths/xlengths/sink are tensors (stand-ins where absent).
        The op checks every tensor it touches, reads each cache's geometry from its shape and
        strides, and allocates lse, the split buffers and (when out is None) the output."""
        stream = _ops.raw_stream(self.device_index)
        if self.tail is not None:
            return self._run_in_two(q, cache, indices, lengths, xcache, xidx, xlengths, sink, out, stream)
        if out is None:
            return _ops.decode_alloc(q, cache, indices, lengths, xcache, xidx, xlengths, sink, self.has_sink,
                                     self.splits, self.extra_width, self.scale_log2, stream)
        return out, _ops.decode(q, cache, indices, lengths, xcache, xidx, xlengths, sink, self.has_sink, out,
                                self.splits, self.extra_width, self.scale_log2, stream)

    def _run_in_two(self, q, cache, indices, lengths, xcache, xidx, xlengths, sink, out, stream):
        """The requests before the tail unsplit, then the tail with its splits: two op calls on
        views of the same tensors, their lse joined."""
        if out is None:
            out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
        k = q.shape[0] - self.tail[0]
        lse = [_ops.decode(q[part], cache, indices[part], lengths[part], xcache, xidx[part], xlengths[part], sink,
                           self.has_sink, out[part], splits, self.extra_width, self.scale_log2, stream)
               for part, splits in ((slice(None, k), self.splits), (slice(k, None), self.tail[1]))]
        return out, torch.cat(lse)


class _DecodeCalls:
    """The decode ops and the stream query, looked up on first use (CUDA torch only) and kept:
    torch.ops resolves four attributes per access."""

    @functools.cached_property
    def decode(self):
        return torch.ops.vllm_backport.sparse_mla_decode_fp8.default

    @functools.cached_property
    def decode_alloc(self):
        return torch.ops.vllm_backport.sparse_mla_decode_fp8_alloc.default

    @functools.cached_property
    def raw_stream(self):
        return torch._C._cuda_getCurrentRawStream  # the current stream's cudaStream_t, by device index


_ops = _DecodeCalls()


def plan(q, has_sink, width, extra_width, softmax_scale, splits=None):
    """The DecodePlan of q's layout; width = listed slots per token (main + extra), extra_width
    those of the extra cache (0: none). Forced splits (tests, benchmarks) take one launch."""
    b, s_q, h, _ = q.shape
    tail = None if splits else tail_launch(sm_count(q.device), b, s_q, h, width)
    splits = splits or splits_for(q.device, b * s_q, h, width)
    return DecodePlan(q.device.index, splits, has_sink, extra_width, softmax_scale * 1.4426950408889634, tail)


def prefill_available():
    return hasattr(torch.ops.vllm_backport, "sparse_mla_prefill_bf16")


def prefill_fits(q, kv, indices, topk_length, out):
    """The prefill op's layout: 16-byte aligned q and kv rows, 4-byte aligned out rows, unit-stride
    indices rows and topk_length."""
    if indices.stride(-1) != 1 or (topk_length is not None and topk_length.stride(0) != 1):
        return False
    return all(v % 16 == 0 for v in (q.data_ptr(), kv.data_ptr(), 2 * q.stride(0), 2 * q.stride(1),
                                     2 * kv.stride(0))) and \
        all(v % 4 == 0 for v in (out.data_ptr(), 2 * out.stride(0), 2 * out.stride(1)))


def prefill(q, kv, indices, topk_length, sink, out, scale_log2):
    """(max_logits, lse) of flash_mla_sparse_fwd's checked arguments; writes out."""
    dummy = indices  # stands in for an absent topk_length / sink (never read)
    return torch.ops.vllm_backport.sparse_mla_prefill_bf16.default(
        q, kv, indices, topk_length if topk_length is not None else dummy, topk_length is not None,
        sink if sink is not None else dummy, sink is not None, out, scale_log2,
        torch._C._cuda_getCurrentRawStream(q.device.index) if q.is_cuda else 0)  # CPU: the op names the backend
