"""Which module of a model first parts from transformers float32, on the GPU machine.

The GPU end-to-end test compares only what comes out of the model. When a checkpoint's log-probabilities
are off from the start (tiny Qwen3.8-Flash-Next and GLM-5.3), this names the first module whose output
differs: it prefills a reference prompt once through vLLM in-process (emulating an SM row, eager) with a
forward hook on every module whose name transformers' float32 model of the same checkpoint also has
(models/reference.load), runs that model on the same tokens with the same hooks, and lists each
shared module's relative error (|vLLM - float32| / |float32|, over the whole output) in call order.
bf16 rounding alone gives about 1e-2; the first module far above its inputs' error is the culprit.

SM is an SM row to emulate, or native.

usage (bundle staged: source /tmp/vllm-backport/env.sh; from the carried working tree):
  python3 tests/device/layer_probe.py FAMILY SM CHECKPOINT_DIR REFERENCE_JSON OUT_JSON [PROMPT_INDEX]
      [--moe-backend NAME]   (vLLM's --moe-backend, e.g. triton in place of Marlin's MoE)
"""

import argparse
import json
import os
import re
import sys

DEPTH = 5  # dotted name parts kept: model.layers.N.self_attn.q_proj
SKIP = re.compile(r"(rotary|dropout|act_fn|_fn$)")


def first_tensor(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def hook_all(model, names, store, order):
    def make(name):
        def hook(module, args, output):
            tensor = first_tensor(output)
            if tensor is not None and tensor.is_floating_point():
                if name not in store:
                    order.append(name)
                store[name] = tensor.detach().float().reshape(-1, tensor.shape[-1]).cpu()
        return hook

    return [module.register_forward_hook(make(name)) for name, module in model.named_modules() if name in names]


def candidates(model):
    return {name for name, _ in model.named_modules()
            if name and name.count(".") < DEPTH and not SKIP.search(name)}


def main(argv):
    parser = argparse.ArgumentParser()
    for name in ("family", "sm", "checkpoint", "reference", "out"):
        parser.add_argument(name)
    parser.add_argument("index", type=int, nargs="?", default=0)
    parser.add_argument("--moe-backend", default=None)
    args = parser.parse_args(argv)
    family, sm, checkpoint = args.family, args.sm, args.checkpoint
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1")
    if sm != "native":  # "native": no emulation (vLLM's CPU build, or a GPU of the row itself)
        os.environ["VLLM_BACKPORT_TARGET"] = sm
    import torch
    from vllm import LLM, SamplingParams

    from models import reference as ref

    prompt = json.load(open(args.reference))["cases"][args.index]["prompt"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    truth = ref.load(family, checkpoint).to(device)
    shared = candidates(truth)
    llm = LLM(model=checkpoint, enforce_eager=True, max_model_len=1024, gpu_memory_utilization=0.06,
              kv_cache_memory_bytes=2 << 30, enable_prefix_caching=False,
              **({"moe_backend": args.moe_backend} if args.moe_backend else {}))
    mine, order = {}, []
    def hook_vllm(model):  # apply_model ships the return value back: keep it None
        hook_all(model, shared & candidates(model), mine, order)

    llm.apply_model(hook_vllm)
    llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=1))
    theirs, _ = {}, []
    hook_all(truth, set(mine), theirs, _)
    with torch.no_grad():
        truth(torch.tensor([prompt], device=device))
    rows = []
    for name in order:
        a, b = mine[name], theirs.get(name)
        if b is None or a.numel() != b.numel():
            rows.append({"module": name, "vllm": list(a.shape), "float32": None if b is None else list(b.shape)})
            continue
        a = a.reshape(b.shape)
        rows.append({"module": name, "shape": list(b.shape),
                     "rel_err": round(float((a - b).norm() / b.norm().clamp_min(1e-30)), 5)})
    for row in rows:
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump({"family": family, "sm": sm, "moe_backend": args.moe_backend, "prompt_tokens": len(prompt),
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
