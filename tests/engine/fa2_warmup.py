"""FlashAttention 2's kernels JIT-compiled for this GPU once, before the servers of an emulated run start.

vLLM's FlashAttention 2 library carries sm_80 machine code and sm_80 PTX only (76 PTX modules of 16
kernels each). An sm80/86/89 card runs the machine code; a newer GPU emulating those rows has the
driver compile each module's PTX when a kernel of it first runs (ptxas -O3 for sm_90 takes about
9 s per module on one server core). Fourteen servers reaching the same modules at once each compile
them, and a server stuck compiling in graph capture missed the first run's time limit. So before
the servers, one process per (head size, causal, split-KV or not) the served checkpoints need runs
one paged call, all at once, into the driver cache the servers share (CUDA_CACHE_PATH): each module
is compiled once, in parallel, and the servers load the result.

    python3 fa2_warmup.py HEAD_DIM CAUSAL SPLIT     # one call (0/1 flags), run by gpu_serve.py
"""

import json
import pathlib
import sys

# FlashAttention 2's head sizes reach 256; larger ones (DeepSeek-V4's 512 latent) are never FA2's.
MAX_HEAD_DIM = 256


def head_dims(checkpoint_dirs):
    """The attention head sizes FlashAttention 2 serves for these checkpoints (their config's
    head_dim, where it has one FA2 can run; MLA models have none, 0 (tiny GLM-5.3 multimodal) or a larger one)."""
    found = set()
    for folder in checkpoint_dirs:
        config = json.loads((pathlib.Path(folder) / "config.json").read_text())
        config = config.get("text_config", config)
        if isinstance(config.get("head_dim"), int) and 0 < config["head_dim"] <= MAX_HEAD_DIM:
            found.add(config["head_dim"])
    return sorted(found)


def variants(dims):
    """(head_dim, causal, split) of each warm-up call: prefill and decode shapes reach different modules."""
    return [(d, causal, split) for d in dims for causal in (True, False) for split in (False, True)]


def one_call(head_dim, causal, split):
    """One paged FlashAttention 2 call in bf16: a 64-token query (split off) or a 1-token query over
    4,096 keys, where the split-KV kernel is what FA2's heuristic picks (split on)."""
    import torch
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    heads, block, keys = 2, 16, 4096
    queries = 1 if split else 64
    q = torch.randn(queries, heads, head_dim, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(keys // block, block, 1, head_dim, dtype=torch.bfloat16, device="cuda")
    table = torch.arange(keys // block, dtype=torch.int32, device="cuda")[None]
    flash_attn_varlen_func(q, k, k.clone(), max_seqlen_q=queries,
                           cu_seqlens_q=torch.tensor([0, queries], dtype=torch.int32, device="cuda"),
                           max_seqlen_k=keys, seqused_k=torch.tensor([keys], dtype=torch.int32, device="cuda"),
                           causal=causal, block_table=table, num_splits=0 if split else 1, fa_version=2)
    torch.cuda.synchronize()


if __name__ == "__main__":
    one_call(int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1")
