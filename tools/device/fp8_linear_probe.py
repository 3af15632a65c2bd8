"""Is there a faster decode-sized block-FP8 linear than Marlin W8A16 on sm8x? One GPU call, no engine.

DeepSeek-V4-Flash's block-FP8 linears (e4m3 weights, one float32 scale per 128 x 128 block) run
through vLLM's Marlin W8A16 on sm8x: five calls a layer, 12.6 us each at batch 1 in the TP 8
decode profile (tools/bench/RESULTS.md), 5-10x their bytes. This probe times, at a TP 8 rank's
shapes and 1-64 tokens, under CUDA graphs:
- marlin: vLLM's apply_fp8_marlin_linear on the repacked weight (what runs today);
- gemv (1-8 tokens): a Triton weight-streaming kernel written here (codes decoded through fp16's bit layout,
  products accumulated element-wise, one reduction at the end; no tensor cores), K split over
  programs with float32 atomics when N alone leaves SMs idle;
and checks each against float64 on the dequantised weight. Run with vLLM importable (the staged
bundle): python3 tools/device/fp8_linear_probe.py OUT_JSON
"""

import json
import sys

import torch
import triton
import triton.language as tl

# (name, N, K) of one TP 8 rank: fused wq_a+wkv (1024+512 over 8), wq_b (8 heads x 512), wo_b,
# the shared expert's gate_up (2 x 2048 / 8) and down, the indexer's replicated wq_b (64 x 128).
SHAPES = [("wqa_wkv", 192, 4096), ("wq_b", 4096, 1024), ("wo_b", 4096, 1024), ("shared_gate_up", 512, 4096),
          ("shared_down", 4096, 256), ("indexer_wq_b", 8192, 1024)]
TOKENS = (1, 2, 4, 8, 16, 64)


@triton.jit
def gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_sn, k_per_split,
                M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ATOMIC: tl.constexpr):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    m = tl.arange(0, M_PAD)
    mmask = m < M
    kk = tl.arange(0, BLOCK_K)
    k_lo = tl.program_id(1) * k_per_split
    acc = tl.zeros((M_PAD, BLOCK_N, BLOCK_K), tl.float32)
    srow = s_ptr + (tl.program_id(0) * BLOCK_N // 128) * stride_sn  # BLOCK_N divides 128: one scale row
    for k0 in range(k_lo, k_lo + k_per_split, BLOCK_K):
        c = tl.load(w_ptr + n.to(tl.int64)[:, None] * K + (k0 + kk)[None, :], mask=nmask[:, None], other=0)
        c = c.to(tl.int16)
        # e4m3 -> fp16 with the exponent bias 8 short: exact for every finite code (subnormals too).
        h = (((c & 0x80) << 8) | ((c & 0x7F) << 7)).to(tl.float16, bitcast=True).to(tl.float32)
        x = tl.load(x_ptr + m[:, None] * K + (k0 + kk)[None, :], mask=mmask[:, None], other=0.0).to(tl.float32)
        x = x * (tl.load(srow + k0 // 128) * 256.0)
        acc += x[:, None, :] * h[None, :, :]
    out = tl.sum(acc, axis=2)
    dst = y_ptr + m[:, None] * N + n[None, :]
    if ATOMIC:
        tl.atomic_add(dst, out, mask=mmask[:, None] & nmask[None, :])
    else:
        tl.store(dst, out.to(tl.bfloat16), mask=mmask[:, None] & nmask[None, :])


def gemv(x, codes, scale, block_n, block_k, split, warps):
    M, K = x.shape
    N = codes.shape[0]
    m_pad = max(1, triton.next_power_of_2(M))
    k_per_split = triton.cdiv(K // block_k, split) * block_k
    grid = (triton.cdiv(N, block_n), triton.cdiv(K, k_per_split))
    atomic = grid[1] > 1
    y = torch.zeros((M, N), dtype=torch.float32, device=x.device) if atomic else torch.empty(
        (M, N), dtype=torch.bfloat16, device=x.device)
    gemv_kernel[grid](x, codes, scale, y, M, N, K, scale.stride(0), k_per_split, M_PAD=m_pad, BLOCK_N=block_n,
                      BLOCK_K=block_k, ATOMIC=atomic, num_warps=warps)
    return y.to(torch.bfloat16) if atomic else y


class _Layer(torch.nn.Module):
    pass


def marlin_layer(codes, scale):
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import prepare_fp8_layer_for_marlin
    layer = _Layer()
    n, k = codes.shape
    layer.weight = torch.nn.Parameter(codes.clone(), requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(scale.clone(), requires_grad=False)
    layer.output_size_per_partition, layer.input_size_per_partition = n, k
    layer.weight_block_size = [128, 128]
    layer.orig_dtype = torch.bfloat16
    prepare_fp8_layer_for_marlin(layer, size_k_first=False)
    return layer


def graph_us(fn, reps=200):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps // 20):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def rel_err(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def copy_rate():
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = graph_us(lambda: b.copy_(a), reps=20)
    return 2 * a.numel() / (us * 1e-6)


def main(out):
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import apply_fp8_marlin_linear
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw = copy_rate()
    rows = []
    for name, n, k in SHAPES:
        codes = (torch.randn(n, k, device="cuda") * 60).clamp(-448, 448).to(torch.float8_e4m3fn)
        scale = torch.rand(triton.cdiv(n, 128), k // 128, device="cuda") * 0.01 + 0.001
        w64 = (codes.double() * scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1))
        layer = marlin_layer(codes, scale)
        for t in TOKENS:
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            ref = x.double() @ w64.T

            def marlin():
                return apply_fp8_marlin_linear(input=x, weight=layer.weight, weight_scale=layer.weight_scale_inv,
                                               workspace=None, size_n=n, size_k=k, bias=None)
            row = dict(shape=name, n=n, k=k, tokens=t, floor_us=(n * k + 2 * t * (n + k)) / bw * 1e6,
                       marlin_us=graph_us(marlin), marlin_err=rel_err(marlin(), ref))
            best = None
            for block_n in (16, 32, 64):
                for block_k in (64, 128):  # divides 128: one scale a step
                    for warps in (4,):
                        programs = triton.cdiv(n, block_n)
                        split = 1
                        while programs * split < 2 * sms and split * 2 <= k // block_k:
                            split *= 2
                        if t > 8 or triton.next_power_of_2(t) * block_n * block_k > 8192:  # acc registers
                            continue

                        def ours():
                            return gemv(x, codes.view(torch.uint8), scale, block_n, block_k, split, warps)
                        try:
                            err = rel_err(ours(), ref)
                            us = graph_us(ours)
                        except Exception as e:  # a variant this card cannot build: noted, not fatal
                            row.setdefault("errors", []).append(f"{block_n}x{block_k}/{warps}: {str(e)[:80]}")
                            continue
                        if best is None or us < best[0]:
                            best = (us, err, dict(block_n=block_n, block_k=block_k, warps=warps, split=split))
            if best:
                row.update(gemv_us=best[0], gemv_err=best[1], gemv_tile=best[2], speedup=row["marlin_us"] / best[0])
            rows.append(row)
            print(json.dumps(row), flush=True)
    json.dump(dict(card=torch.cuda.get_device_name(), copy_GBps=bw / 1e9, rows=rows), open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
