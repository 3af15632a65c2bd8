"""Where GLM-5.3's prefill parts from transformers float32 (issue 40), on the GPU machine.

The GPU end-to-end test found vLLM's prefill log-probabilities of the tiny GLM-5.3 checkpoint off at a
few positions while its decode agrees. This serves the reference prompts with their float32 greedy
continuations as prompts (prompt log-probabilities: one prefill each) in-process, emulating an SM row,
and compares each continuation token's log-probability with the one the reference JSON holds
(transformers float32, models/reference.py).
One MODE per process; each swaps one prefill-only piece for an exact one, so the mode whose
differences vanish names the piece:

  plain       vLLM as served
  kda_ref     KDA's chunked prefill (vLLM's Triton chunk_kda_with_fused_gate) by transformers' float32
              recurrence (recurrent_kimi_delta_attention), per sequence of the packed batch
  mhc_native  vLLM's torch mHC (forward_native) in place of the route's Triton mHC
  no_dense    the route's sparse kernel for prefill too (no FlashAttention 2 dense-MHA prefill)

usage (bundle staged: source /tmp/vllm-backport/env.sh; from the carried working tree):
  python3 tools/device/glm_prefill_probe.py MODE SM CHECKPOINT_DIR REFERENCE_JSON OUT_JSON
Not yet run on a GPU (2026-12-06: no device machine could be started).
"""

import json
import os
import sys

MODES = ("plain", "kda_ref", "mhc_native", "no_dense")
SHORT_PROMPTS = 4  # the reference's short prompts (the long one needs its own chunked-prefill check)
REPORTED = 0.25  # log-probability differences above this are listed by position


def kda_reference(q, k, v, raw_g, beta, A_log, g_bias, initial_state=None, output_final_state=True,
                  use_qk_l2norm_in_kernel=True, cu_seqlens=None, safe_gate=True, lower_bound=-5.0, scale=None,
                  **_):
    """chunk_kda_with_fused_gate's contract by transformers' recurrence: q, k, v, raw_g (1, T, H, D);
    beta (1, T, H) already sigmoided; initial_state (N, H, K, V) per sequence of cu_seqlens; vLLM's
    bounded gate lower_bound * sigmoid(exp(A_log) * (raw_g + g_bias)). Returns (out in q's dtype,
    final states (N, H, K, V) float32)."""
    import torch
    from transformers.models.glm5_next.modeling_glm5_next import recurrent_kimi_delta_attention

    heads, width = q.shape[2], q.shape[3]
    gate = lower_bound * torch.sigmoid(torch.exp(A_log.float()).view(1, 1, heads, 1)
                                       * (raw_g.float().reshape(q.shape) + g_bias.float().view(1, 1, heads, width)))
    beta = beta.float().reshape(1, -1, heads)
    bounds = cu_seqlens.tolist() if cu_seqlens is not None else [0, q.shape[1]]
    outs, finals = [], []
    for n in range(len(bounds) - 1):
        s, e = bounds[n], bounds[n + 1]
        out, final = recurrent_kimi_delta_attention(
            q[:, s:e], k[:, s:e], v[:, s:e], g=gate[:, s:e], beta=beta[:, s:e],
            initial_state=None if initial_state is None else initial_state[n:n + 1].float(),
            output_final_state=True, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        outs.append(out)
        finals.append(final[0])
    return torch.cat(outs, dim=1).to(q.dtype), torch.stack(finals)


def apply(mode):
    if mode == "kda_ref":
        import vllm.models.glm5next.common.kda as kda

        kda.chunk_kda_with_fused_gate = kda_reference
    elif mode == "no_dense":
        from vllm_backport.sm8x.glm5_next import attention

        attention.Sm8xGlmSparseMLAImpl.supports_dense_mha_prefill = False
    elif mode == "mhc_native":
        from vllm_backport.sm8x.glm5_next import mhc

        mhc._forward = lambda op_name, kernel: (lambda self, *a, **k: self.forward_native(*a, **k))


def vllm_logprobs(checkpoint, sequences):
    from vllm import LLM, SamplingParams

    llm = LLM(model=checkpoint, enforce_eager=True, max_model_len=1024, gpu_memory_utilization=0.06,
              kv_cache_memory_bytes=2 << 30, enable_prefix_caching=False)
    outputs = llm.generate([{"prompt_token_ids": s} for s in sequences], SamplingParams(max_tokens=1, prompt_logprobs=0))
    return [[None] + [position[s[i]].logprob for i, position in enumerate(o.prompt_logprobs) if i > 0]
            for s, o in zip(sequences, outputs)]


def main(argv):
    mode, sm, checkpoint, reference, out = argv
    if mode not in MODES:
        sys.exit(f"glm_prefill_probe: MODE is one of {', '.join(MODES)}, not {mode!r}")
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_BACKPORT_TARGET=sm, HF_HUB_OFFLINE="1")
    cases = json.load(open(reference))["cases"][:SHORT_PROMPTS]
    sequences = [c["prompt"] + c["tokens"] for c in cases]
    apply(mode)
    mine = vllm_logprobs(checkpoint, sequences)
    report = []
    for n, case in enumerate(cases):
        start = len(case["prompt"])
        diffs = [abs(mine[n][start + step] - want) for step, want in enumerate(case["logprobs"])]
        report.append({"mode": mode, "sm": sm, "prompt": n, "prompt_tokens": start, "max_diff": round(max(diffs), 4),
                       "off": [(step, round(mine[n][start + step], 3), want)  # (step, vLLM, float32)
                               for step, want in enumerate(case["logprobs"]) if diffs[step] > REPORTED]})
        print(json.dumps(report[-1]), flush=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
