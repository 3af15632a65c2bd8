"""What the GPU end-to-end test serves: one case per model, checkpoint format and serving mode.

Each case is a `vllm serve` command scaled from the README's recommended one to a single GPU and a
tiny checkpoint, plus what the test checks on it. Cases of one model that must produce the same
greedy text (DSpark on and off, graphs and eager) share a `same_text_as` group. The prompts, and
where transformers can read the checkpoint its float32 greedy tokens, come from the checkpoint's
reference JSON (models/reference.py).
"""

import dataclasses
import json

# Every server of a run shares the GPU with others: a fixed KV budget instead of a share of memory.
COMMON = ["--gpu-memory-utilization", "0.06", "--kv-cache-memory-bytes", "2G", "--max-num-seqs", "16"]

# The README's FULL_AND_PIECEWISE recommendation with the capture list bounded for one GPU.
GRAPHS = json.dumps({"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8],
                     "max_cudagraph_capture_size": 8})
DSPARK = json.dumps({"method": "dspark", "num_speculative_tokens": 5})
MTP = json.dumps({"method": "mtp", "num_speculative_tokens": 3})

DSV4_FLAGS = ["--max-model-len", "4096", "--kv-cache-dtype", "fp8_ds_mla", "--trust-remote-code",
              "--disable-custom-all-reduce", "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
              "--hf-overrides", json.dumps({"head_dtype": "float32"}), "--tokenizer-mode", "deepseek_v4"]
NCCL = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}

# The route's kernels every DeepSeek-V4 request reaches (sites of vllm_backport/sm8x/deepseek_v4/,
# plus the attention subclass's o_proj): prefill and decode attention, the prefill gather, both
# compressors, the indexer's query, logits (ragged prefill, paged decode) and metadata, every mHC
# step of the main model. Not listed: padded-decode packing and MTP's own mHC calls (other
# configurations), DeepGEMM's mHC prenorm GEMM (only TileLang's mHC functions call it, and the route
# replaces them whole), and DSpark's mHC calls, which DSPARK_SITES lists for the cases that draft.
_NV = "vllm.models.deepseek_v4.nvidia"
DSV4_SITES = [
    f"{_NV}.flashmla.flash_mla_with_kvcache",
    f"{_NV}.flashmla.flash_mla_sparse_fwd",
    f"{_NV}.flashmla.dequantize_and_gather_k_cache",
    f"{_NV}.ops.sparse_attn_compress_cutedsl._SPARSE_ATTN_COMPRESSOR_CUTEDSL_KERNEL",
    "vllm.models.deepseek_v4.compressor.compress_norm_rope_store_triton",
    "vllm.models.deepseek_v4.attention.fused_indexer_q_rope_quant",
    "vllm.model_executor.layers.sparse_attn_indexer.fp8_fp4_mqa_logits",
    "vllm.model_executor.layers.sparse_attn_indexer.fp8_fp4_paged_mqa_logits",
    "vllm.v1.attention.backends.mla.indexer.get_paged_mqa_logits_metadata",
    f"{_NV}.model.mhc_pre_broadcast_tilelang",
    f"{_NV}.model.mhc_fused_post_pre_tilelang",
    f"{_NV}.model.mhc_post_tilelang",
    f"{_NV}.model.hc_head_fused_kernel_tilelang",
    "vllm_backport.kernels.o_proj_ops.o_proj",
    # the tiny model's narrow block-FP8 linears (all but wq_b) leave Marlin for the plugin's kernel
    "vllm_backport.kernels.fp8_linear_ops.fp8_block_linear",
]
DSPARK_SITES = [f"{_NV}.dspark.mhc_post_tilelang", f"{_NV}.dspark.hc_head_fused_kernel_tilelang"]

# GLM-5.3's route (vllm_backport/sm8x/glm5_next/): the sites every request reaches (construction's
# DeepGEMM check, the indexer query quantiser, key-pool prefill write and decode update, paged decode
# logits, sparse-MLA attention, the three mHC ops).
_GLM = "vllm.models.glm5next"
GLM_SITES = [
    f"{_GLM}.nvidia.sparse_indexer.has_deep_gemm",
    f"{_GLM}.common.attention.fwht128_quant_fp8",
    f"{_GLM}.nvidia.ops.kpool_compress.kpool_compress_and_write_cache",
    f"{_GLM}.nvidia.ops.kpool_compress.kpool_decode_update_and_maybe_write_cache_batched",
    "vllm.utils.deep_gemm.fp8_fp4_paged_mqa_logits",
    "vllm_backport.sm8x.glm5_next.attention.flash_mla_sparse_fwd",
    "vllm_backport.sm8x.glm5_next.mhc.MHCPreOp",
    "vllm_backport.sm8x.glm5_next.mhc.MHCFusedPostPreOp",
    "vllm_backport.sm8x.glm5_next.mhc.MHCPostOp",
]

# GLM's reference holds a prompt of 4,100 tokens (models/glm5_next.py): prefill in chunks of 2,048.
GLM_FLAGS = ("--max-model-len", "8192", "--max-num-batched-tokens", "2048")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    checkpoint: str  # folder name under the bundle's models/
    args: tuple
    env: tuple = ()  # (name, value) pairs
    same_text_as: str = ""  # cases in one group must give the same greedy text
    sites: tuple = ()  # route kernels that must have run
    start_timeout: int = 600
    gpus: int = 1  # GPUs the case needs (skipped, and said so, on a machine with fewer)
    echo: bool = False  # check the longest prompt's echoed tokens and log-probabilities

    @property
    def command_args(self):
        """The case's flags, with its parallelism (TP 1 unless the case says otherwise)."""
        parallel = () if any(a.endswith("-parallel-size") for a in self.args) else ("--tensor-parallel-size", "1")
        return self.args + parallel


# Order matters on a newer GPU: a checkpoint's first case starts before its others (gpu_serve.py),
# so an eager case goes first where FlashAttention 2's PTX must be JIT-compiled (Qwen3.5).
CASES = [
    Case("dsv4_fp4_graphs_dspark", "tiny_deepseek_v4_fp4",
         tuple(DSV4_FLAGS + ["--compilation-config", GRAPHS, "--speculative-config", DSPARK]), tuple(NCCL.items()),
         same_text_as="dsv4", sites=tuple(DSV4_SITES + DSPARK_SITES)),
    Case("dsv4_fp4_eager", "tiny_deepseek_v4_fp4", tuple(DSV4_FLAGS + ["--enforce-eager"]), tuple(NCCL.items()),
         same_text_as="dsv4", sites=tuple(DSV4_SITES)),
    Case("dsv4_fp4_graphs", "tiny_deepseek_v4_fp4", tuple(DSV4_FLAGS + ["--compilation-config", GRAPHS]),
         tuple(NCCL.items()), same_text_as="dsv4", sites=tuple(DSV4_SITES)),
    Case("dsv4_fp4_eager_dspark", "tiny_deepseek_v4_fp4",
         tuple(DSV4_FLAGS + ["--enforce-eager", "--speculative-config", DSPARK]), tuple(NCCL.items()),
         same_text_as="dsv4", sites=tuple(DSV4_SITES + DSPARK_SITES)),
    Case("qwen3_5_bf16_eager", "tiny_qwen3_5", ("--max-model-len", "4096", "--enforce-eager"),
         same_text_as="qwen3_5_bf16"),
    Case("qwen3_5_bf16", "tiny_qwen3_5", ("--max-model-len", "4096"), same_text_as="qwen3_5_bf16"),
    Case("qwen3_5_awq", "tiny_qwen3_5_awq", ("--max-model-len", "4096")),
    Case("qwen4_exp_fp8_mtp", "tiny_qwen4_exp_fp8",
         ("--max-model-len", "4096", "--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}),
          "--speculative-config", MTP), same_text_as="qwen4_exp_fp8"),
    Case("qwen4_exp_fp8_mtp_ple_offload", "tiny_qwen4_exp_fp8",
         ("--max-model-len", "4096", "--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}),
          "--speculative-config", MTP), (("VLLM_PLE_CPU_OFFLOAD", "1"),), same_text_as="qwen4_exp_fp8"),
    Case("qwen4_exp_fp8_eager", "tiny_qwen4_exp_fp8", ("--max-model-len", "4096", "--enforce-eager"),
         same_text_as="qwen4_exp_fp8"),
    Case("glm5_next_bf16", "tiny_glm5_next", GLM_FLAGS, same_text_as="glm5_next", sites=tuple(GLM_SITES), echo=True),
    Case("glm5_next_bf16_eager", "tiny_glm5_next", GLM_FLAGS + ("--enforce-eager",), same_text_as="glm5_next",
         sites=tuple(GLM_SITES), echo=True),
    # Prefix caching on (vLLM's default: KDA states cached in 'align' mode) and off give the same text.
    Case("glm5_next_bf16_no_prefix_cache", "tiny_glm5_next", GLM_FLAGS + ("--no-enable-prefix-caching",),
         same_text_as="glm5_next", sites=tuple(GLM_SITES), echo=True),
    Case("glm5_next_awq", "tiny_glm5_next_awq", GLM_FLAGS, sites=tuple(GLM_SITES), echo=True),
    # The released multimodal layout with its MTP layer drafting (random, so acceptance is low: the
    # check is that greedy text and logprobs stay the reference's). Text only: the tiny tokenizer has
    # no image tokens, so the vision tower is left out as `--language-model-only` leaves it out.
    Case("glm5_next_mtp", "tiny_glm5_next_mtp", GLM_FLAGS + ("--language-model-only", "--speculative-config", MTP),
         sites=tuple(GLM_SITES), echo=True),
    # AWQ with MTP and PLE offload parted from float32 by 0.7-1.2 on short prompts (2026-12-07, sm80),
    # where FP8 stays within 0.5: plain eager, and eager with vLLM's Triton WNA16 experts in place of
    # Marlin's, tell the MoE kernel from the MTP / offload / graph path.
    Case("qwen4_exp_awq_eager", "tiny_qwen4_exp_awq", ("--max-model-len", "4096", "--enforce-eager"),
         same_text_as="qwen4_exp_awq"),
    Case("qwen4_exp_awq_eager_triton_moe", "tiny_qwen4_exp_awq",
         ("--max-model-len", "4096", "--enforce-eager", "--moe-backend", "triton"), same_text_as="qwen4_exp_awq"),
    Case("qwen4_exp_awq_mtp", "tiny_qwen4_exp_awq",
         ("--max-model-len", "4096", "--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}),
          "--speculative-config", MTP), (("VLLM_PLE_CPU_OFFLOAD", "1"),), same_text_as="qwen4_exp_awq"),
]

# Two GPUs (issue 41): the recommended DeepSeek-V4 command at TP 2 and at PP 2, Qwen3.8-Flash-Next FP8 at
# TP 2 with expert parallelism; the same greedy text as one GPU, and DSpark/MTP acceptance within
# ACCEPTANCE_MARGIN of the one-GPU case of their group.
CASES += [
    Case("dsv4_fp4_graphs_dspark_tp2", "tiny_deepseek_v4_fp4",
         tuple(DSV4_FLAGS + ["--compilation-config", GRAPHS, "--speculative-config", DSPARK, "--tensor-parallel-size", "2"]),
         tuple(NCCL.items()), same_text_as="dsv4", sites=tuple(DSV4_SITES + DSPARK_SITES), gpus=2),
    Case("dsv4_fp4_graphs_dspark_pp2", "tiny_deepseek_v4_fp4",
         tuple(DSV4_FLAGS + ["--compilation-config", GRAPHS, "--speculative-config", DSPARK, "--pipeline-parallel-size", "2"]),
         tuple(NCCL.items()), same_text_as="dsv4", sites=tuple(DSV4_SITES), gpus=2),
    Case("qwen4_exp_fp8_mtp_tp2_ep", "tiny_qwen4_exp_fp8",
         ("--max-model-len", "4096", "--compilation-config", json.dumps({"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}),
          "--speculative-config", MTP, "--tensor-parallel-size", "2", "--enable-expert-parallel"),
         same_text_as="qwen4_exp_fp8", gpus=2),
]
ACCEPTANCE_MARGIN = 0.1

BY_NAME = {case.name: case for case in CASES}
