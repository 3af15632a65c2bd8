"""Where GLM-5.3's prefill parts from transformers float32 (issue 40), on the GPU machine.

The GPU end-to-end test found vLLM's prefill log-probabilities of the tiny GLM-5.3 checkpoint off at a
few positions while its decode agrees. This serves the reference prompts with their float32 greedy
continuations as prompts (prompt log-probabilities: one prefill each) in-process, emulating an SM row,
and compares every position's log-probability with transformers' float32 forward of the same tokens.
One MODE per process; each swaps one prefill-only piece for an exact one, so the mode whose
differences vanish names the piece:

  plain       vLLM as served
  kda_ref     KDA's chunked prefill (vLLM's Triton chunk_kda_with_fused_gate) by a float32 recurrence
              (the same gate, beta and l2-norm as transformers' recurrent_kimi_delta_attention)
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
    """chunk_kda_with_fused_gate's contract, computed token by token in float32: q, k, v, raw_g
    (1, T, H, D); beta (1, T, H) already sigmoided; initial_state (N, H, K, V) per sequence of cu_seqlens."""
    import torch

    tokens, heads, width = q.shape[1], q.shape[2], q.shape[3]
    scale = width ** -0.5 if scale is None else scale
    qf, kf, vf = q[0].float(), k[0].float(), v[0].float()
    if use_qk_l2norm_in_kernel:
        qf = qf / qf.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        kf = kf / kf.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    gate = raw_g[0].float().reshape(tokens, heads, width) + g_bias.float().view(1, heads, width)
    gate = lower_bound * torch.sigmoid(torch.exp(A_log.float()).view(1, heads, 1) * gate)
    b = beta.float().reshape(tokens, heads)
    out = torch.empty(tokens, heads, v.shape[3], device=q.device, dtype=torch.float32)
    bounds = cu_seqlens.tolist() if cu_seqlens is not None else [0, tokens]
    finals = []
    for n in range(len(bounds) - 1):
        state = (initial_state[n].float().clone() if initial_state is not None
                 else torch.zeros(heads, width, v.shape[3], device=q.device))
        for t in range(bounds[n], bounds[n + 1]):
            state = state * torch.exp(gate[t]).unsqueeze(-1)
            predicted = torch.einsum("hk,hkv->hv", kf[t], state)
            state = state + torch.einsum("hk,hv->hkv", kf[t], b[t].unsqueeze(-1) * (vf[t] - predicted))
            out[t] = torch.einsum("hk,hkv->hv", qf[t] * scale, state)
        finals.append(state)
    return out.unsqueeze(0).to(q.dtype), torch.stack(finals)


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


def reference_logprobs(checkpoint, sequences):
    import torch

    sys.path.insert(0, os.getcwd())
    from models import glm5_next

    model = glm5_next.load_reference(checkpoint).cuda().eval()
    out = []
    with torch.no_grad():
        for s in sequences:
            logp = torch.log_softmax(model(input_ids=torch.tensor([s], device="cuda")).logits[0].float(), -1)
            out.append([None] + [logp[i - 1, s[i]].item() for i in range(1, len(s))])
    return out


def main(argv):
    mode, sm, checkpoint, reference, out = argv
    if mode not in MODES:
        sys.exit(f"glm_prefill_probe: MODE is one of {', '.join(MODES)}, not {mode!r}")
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_BACKPORT_TARGET=sm, HF_HUB_OFFLINE="1")
    cases = json.load(open(reference))["cases"][:SHORT_PROMPTS]
    sequences = [c["prompt"] + c["tokens"] for c in cases]
    apply(mode)
    mine = vllm_logprobs(checkpoint, sequences)
    theirs = reference_logprobs(checkpoint, sequences)
    report = []
    for n, (case, s) in enumerate(zip(cases, sequences)):
        diffs = [abs(mine[n][i] - theirs[n][i]) for i in range(1, len(s))]
        report.append({"mode": mode, "sm": sm, "prompt": n, "prompt_tokens": len(case["prompt"]), "tokens": len(s),
                       "max_diff": round(max(diffs), 4),
                       "off": [(i, round(mine[n][i], 3), round(theirs[n][i], 3))
                               for i in range(1, len(s)) if diffs[i - 1] > REPORTED]})
        print(json.dumps(report[-1]), flush=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
