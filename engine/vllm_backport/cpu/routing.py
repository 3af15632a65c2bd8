"""MoE routing of DeepSeek-V4: bias-steered top-k and hash-table routing (float32 scores)."""

import torch
import torch.nn.functional as F


def _scores(logits, scoring_func):
    x = logits.to(torch.float32)
    if scoring_func == "sqrtsoftplus":
        return F.softplus(x).sqrt()
    if scoring_func == "sigmoid":
        return torch.sigmoid(x)
    if scoring_func == "softmax":
        return torch.softmax(x, dim=-1)
    raise ValueError(f"vllm_backport CPU routing: scoring_func {scoring_func!r} is not supported "
                     "(use sqrtsoftplus, sigmoid or softmax)")


def _no_fused_shared(op, count):
    if count:
        raise NotImplementedError(f"vllm_backport's CPU {op} does not fuse shared experts into routing "
                                  f"(num_fused_shared_experts={count}); vLLM's DeepSeek-V4 CPU path passes 0.")


def biased_topk(hidden_states, gating_output, correction_bias, topk, renormalize, scoring_func,
                num_fused_shared_experts, routed_scaling_factor, apply_routed_scaling_factor_on_output):
    """The bias only chooses the experts; the weights are the unbiased scores."""
    _no_fused_shared("biased_topk_cpu", num_fused_shared_experts)
    scores = _scores(gating_output, scoring_func)
    ids = torch.topk(scores + correction_bias.to(torch.float32), topk, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
        if apply_routed_scaling_factor_on_output and routed_scaling_factor is not None:
            weights = weights * routed_scaling_factor
    return weights.contiguous(), ids.to(torch.int32)


def hash_topk(gating_output, tid2eid, topk, scoring_func, num_fused_shared_experts, num_experts,
              routed_scaling_factor):
    """Experts from the token's row of the hash table; non-softmax scores are renormalised to
    sum to routed_scaling_factor."""
    _no_fused_shared("hash_topk_cpu", num_fused_shared_experts)
    scores = _scores(gating_output, scoring_func)
    ids = tid2eid[:, :topk].long()
    weights = scores.gather(1, ids)
    if scoring_func != "softmax":
        total = weights.sum(dim=-1, keepdim=True)
        weights = torch.where(total > 0, weights / total * routed_scaling_factor, weights)
    return weights.contiguous(), ids.to(torch.int32)


def biased_topk_fake(hidden_states, gating_output, correction_bias, topk, *args):
    n = gating_output.shape[0]
    return (gating_output.new_empty((n, topk), dtype=torch.float32),
            gating_output.new_empty((n, topk), dtype=torch.int32))


def hash_topk_fake(gating_output, tid2eid, topk, *args):
    return biased_topk_fake(None, gating_output, None, topk)
