"""DeepSeek-V4's sparse-MLA attention layer on sm80/86/89.

FlashMLA's layer (vllm/models/deepseek_v4/nvidia/flashmla.py) already splits decode (sparse
attention straight over the fp8_ds_mla caches) from prefill (gather to bf16, then sparse
attention); the route (this package's ROUTE) binds our kernels in place of FlashMLA's where it calls them.
What this subclass changes is what cannot be rebound: no DeepGEMM FP8 einsum recipe at
construction, an o_proj (inverse RoPE, grouped `wo_a`, `wo_b`) without DeepGEMM, and no head
padding: FlashMLA's FP8 decode kernel takes 64 or 128 query heads only, ours take 1..128, and a rank
of the recommended TP 8 has 8 (from sm86 PTX on an H200, batch 64, one token: 30.3 us a layer at 8
heads, 40.5 us padded to 64).
"""

import functools

from vllm.models.deepseek_v4.attention import DeepseekV4Attention
from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention
from vllm_backport.kernels import sparse_mla_configs


class DeepseekV4Sm8xAttention(DeepseekV4FlashMLAAttention):
    def __init__(self, *args, **kwargs):
        # FlashMLA's __init__ only adds DeepGEMM's fp8_einsum recipe, which sm8x never uses.
        DeepseekV4Attention.__init__(self, *args, **kwargs)
        from vllm_backport.kernels import o_proj_ops

        # wo_a's K-split counters (made on the model's device; not in the state dict, so no loader
        # writes them): its GEMM sums its own splits, one kernel less a decode step and layer.
        self.register_buffer("vllm_backport_o_proj_counters", o_proj_ops.split_counters(), persistent=False)

    @classmethod
    def get_padded_num_q_heads(cls, num_heads: int) -> int:
        if num_heads > sparse_mla_configs.MAX_HEADS:
            raise ValueError(f"DeepSeek-V4 on sm80/86/89: {num_heads} query heads on one rank; the sparse-MLA "
                             f"kernels take at most {sparse_mla_configs.MAX_HEADS}. Raise --tensor-parallel-size.")
        return num_heads

    def _o_proj(self, o, positions):
        return _o_proj_kernel()(
            o, positions, self.rotary_emb.cos_sin_cache, self.wo_a, self.wo_b,
            n_groups=self.n_local_groups, heads_per_group=self.n_local_heads // self.n_local_groups,
            nope_dim=self.nope_head_dim, rope_dim=self.rope_head_dim, o_lora_rank=self.o_lora_rank,
            counters=self.vllm_backport_o_proj_counters)


@functools.lru_cache(maxsize=1)
def _o_proj_kernel():
    from vllm_backport.kernels import o_proj_ops
    from vllm_backport.sm8x import counts

    return counts.counted("vllm_backport.kernels.o_proj_ops.o_proj", o_proj_ops.o_proj)


def select_attention_cls(vllm_config):
    """Stands in for nvidia/model.py's _select_dsv4_attn_cls: every sm8x layer (main model, MTP,
    DSpark) gets this class, whatever attention backend was asked for."""
    return DeepseekV4Sm8xAttention
