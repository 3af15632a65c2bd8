"""Sparse MLA decode/prefill speed on one GPU, against its measured ceilings and PyTorch.

Decode: batch 1/8/64 query tokens, 128 window + 512 top-k slots each (fp8_ds_mla pages, slots
spread over a cache larger than L2), 64 and 128 heads; each SM row as the engine launches it
(one-pass or two-stage by token count), the previous one-pass kernel, and with --sweep the
two-stage path forced at every size with each stage-2 (attend) configuration. Prefill: 8K and 32K query tokens, 640
indices each, 128 heads. Ceilings are measured in the same run: device copy bandwidth and a
big bf16 matmul. Roofline floor = max(bytes / bandwidth, FLOPs / matmul rate). PyTorch baseline:
gather (+ dequantise) the rows, then SDPA with the sink as an extra key column.

usage: PYTHONPATH=<repo root> python tools/bench/sparse_mla_bench.py [--sweep] [--decode-only] [--out results.json]
"""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench, do_bench_cudagraph

from vllm_backport.kernels import sparse_mla_ops as fm
from vllm_backport.kernels import sparse_mla_configs as cfg
from kernels.testing import sparse_mla_reference as ref

WINDOW, TOPK, BLOCK = 128, 512, 64


def ceilings():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = do_bench(lambda: y.copy_(x), rep=200) * 1e-3
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    tm = do_bench(lambda: a @ b, rep=300) * 1e-3
    del x, y
    return {"copy_bytes_per_s": 2 * (1 << 30) / t, "bf16_flops_per_s": 2 * 8192 ** 3 / tm}


def decode_inputs(batch, heads, g, s_q=1):
    # Big caches (2 GiB-ish) so the gathered slots do not sit in L2 between runs.
    pages = 40000
    cache = torch.randint(0, 256, (pages, ref.page_bytes(BLOCK)), dtype=torch.uint8, device="cuda", generator=g)
    cache.view(pages, -1)[:, BLOCK * 576: BLOCK * 584] = 120  # finite, modest scales
    rope = cache[:, : BLOCK * 576].view(pages, BLOCK, 576)[:, :, 448:]
    rope.copy_((torch.randn(pages, BLOCK, 64, device="cuda", generator=g) * 0.1).to(torch.bfloat16).view(torch.uint8))
    nope = cache[:, : BLOCK * 576].view(pages, BLOCK, 576)[:, :, :448]
    nope[(nope & 0x7F) == 0x7F] = 0  # no NaN codes
    slots = pages * BLOCK
    q = (torch.randn(batch, s_q, heads, 512, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
    idx = torch.randint(0, slots, (batch, s_q, WINDOW), dtype=torch.int32, device="cuda", generator=g)
    xidx = torch.randint(0, slots, (batch, s_q, TOPK), dtype=torch.int32, device="cuda", generator=g)
    lens = torch.full((batch,), WINDOW, dtype=torch.int32, device="cuda")
    xlens = torch.full((batch,), TOPK, dtype=torch.int32, device="cuda")
    sink = torch.randn(heads, device="cuda", generator=g)
    view = ref.cache_view(cache, BLOCK)
    kw = dict(q=q, k_cache=view, block_table=None, cache_seqlens=None, head_dim_v=512,
              tile_scheduler_metadata=None, softmax_scale=512 ** -0.5, is_fp8_kvcache=True,
              indices=idx, topk_length=lens, attn_sink=sink, extra_k_cache=view,
              extra_indices_in_kvcache=xidx, extra_topk_length=xlens)
    return kw, cache


def torch_gather_rows(cache, slots):
    """fp8_ds_mla slots -> bf16 rows, in plain PyTorch (gather bytes, decode, scale)."""
    s = slots.long().clamp_min(0)
    page, off = s // BLOCK, s % BLOCK
    flat = cache.view(-1)
    base = page * cache.stride(0)
    data = flat[(base + off * 576)[..., None] + torch.arange(576, device="cuda")]
    sb = flat[(base + BLOCK * 576 + off * 8)[..., None] + torch.arange(7, device="cuda")]
    nope = data[..., :448].contiguous().view(torch.float8_e4m3fn).to(torch.bfloat16).unflatten(-1, (7, 64))
    nope = nope * torch.exp2(sb.float() - 127).to(torch.bfloat16)[..., None]
    rope = data[..., 448:].contiguous().view(torch.bfloat16)
    return torch.cat([nope.flatten(-2), rope], -1)


def torch_attend(q, rows, valid, sink, scale):
    """q [T, h, 512], rows [T, n, 512] -> [T, h, 512] via SDPA; sink = extra zero-value column."""
    T, n = valid.shape
    zero = torch.zeros(T, 1, 512, dtype=rows.dtype, device=rows.device)
    kv = torch.cat([rows, zero], 1)[:, None]
    bias = torch.zeros(T, 1, q.shape[1], n + 1, dtype=q.dtype, device=q.device)
    bias[..., :n].masked_fill_(~valid[:, None, None, :], float("-inf"))
    bias[..., n] = sink.to(q.dtype)  # the sink column scores exactly sink (its key is zero)
    return F.scaled_dot_product_attention(q[:, None], kv, kv, attn_mask=bias, scale=scale)[:, 0]


def torch_decode(kw, cache):
    idx = torch.cat([kw["indices"], kw["extra_indices_in_kvcache"]], -1)[:, 0]
    rows = torch_gather_rows(cache, idx)
    return torch_attend(kw["q"][:, 0], rows, idx >= 0, kw["attn_sink"], kw["softmax_scale"])


def _graph_time(fn):
    fn()  # compile outside the capture
    torch.cuda.synchronize()
    return do_bench_cudagraph(fn, rep=100) * 1e-3


def _pconf(block_n, num_stages):
    return dict(block_h=64, block_n=block_n, num_warps=8, num_stages=num_stages)


def decode_variants(batch):
    """(label, launch kwargs) of every decode variant timed: the SM rows as the engine runs them
    (two-stage when the tokens fill half the SMs, else one-pass with KV splits), then forced paths."""
    out = []
    for label, sm, native in (("sm86 row, int-codec", "sm86", False), ("sm89 row, native-e4m3", "sm89", True),
                              ("sm80 row, int-codec", "sm80", False)):
        out.append((label, dict(decode=cfg.row(cfg.DECODE, sm), native_fp8=native, prefill=cfg.row(cfg.PREFILL, sm))))
    one = cfg.row(cfg.DECODE, "sm86")
    out.append(("one-pass 64x16 int-codec (previous kernel)", dict(decode=one, native_fp8=False, two_stage=False)))
    if SWEEP:
        for bn, st in ((16, 1), (16, 2), (32, 2), (32, 3)):
            out.append(("two-stage, attend 64x%d s%d, int-codec" % (bn, st),
                        dict(decode=one, native_fp8=False, two_stage=True, prefill=_pconf(bn, st))))
    return out


SWEEP = False


def bench_decode(ceil, results, g):
    for heads in (64, 128):
        for batch in (1, 8, 64):
            kw, cache = decode_inputs(batch, heads, g)
            n = WINDOW + TOPK
            bytes_ = batch * (n * (584 + 4) + 2 * heads * 512 * 2 + heads * 4)
            flops = batch * 4 * heads * n * 512
            floor = max(bytes_ / ceil["copy_bytes_per_s"], flops / ceil["bf16_flops_per_s"])
            # Sanity: kernel vs the PyTorch formulation on these inputs (bf16 both).
            ours, _ = fm.flash_mla_with_kvcache(**kw)
            theirs = torch_decode(kw, cache)
            rel = ((ours.float()[:, 0] - theirs.float()).norm() / theirs.float().norm()).item()
            assert rel < 2e-2 and not ours.isnan().any(), "decode disagrees with PyTorch: %.3g" % rel
            # Decode runs under CUDA graphs in vLLM: time graph replays, so launch overhead is out.
            t_torch = _graph_time(lambda: torch_decode(kw, cache))
            for label, launch in decode_variants(batch):
                got, _ = fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(**launch))
                vrel = ((got.float()[:, 0] - theirs.float()).norm() / theirs.float().norm()).item()
                assert vrel < 2e-2 and not got.isnan().any(), "%s disagrees with PyTorch: %.3g" % (label, vrel)
                t = _graph_time(lambda: fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(**launch)))
                conf = {k.strip("_"): v for k, v in launch.items()}
                results.append(dict(op="decode", batch=batch, heads=heads, variant=label, config=conf, time_us=t * 1e6,
                                    bytes_per_s=bytes_ / t, flops_per_s=flops / t, floor_us=floor * 1e6,
                                    x_floor=t / floor, torch_us=t_torch * 1e6, speedup_vs_torch=t_torch / t,
                                    rel_vs_torch=vrel))
                print(json.dumps(results[-1]), flush=True)
            del kw, cache
            torch.cuda.empty_cache()


def prefill_inputs(tokens, heads, g):
    kv_rows = tokens  # gathered KV buffer as large as the chunk
    kv = (torch.randn(kv_rows, 1, 512, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
    q = (torch.randn(tokens, heads, 512, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
    pos = torch.arange(tokens, device="cuda")
    win = (pos[:, None] - torch.arange(WINDOW, device="cuda")[None, :])
    topk = (torch.rand(tokens, TOPK, device="cuda", generator=g) * (pos[:, None] + 1)).long()
    idx = torch.cat([win, topk], 1).to(torch.int32)  # negative window entries are padding
    lens = torch.full((tokens,), WINDOW + TOPK, dtype=torch.int32, device="cuda")
    sink = torch.randn(heads, device="cuda", generator=g)
    return q, kv, idx[:, None], lens, sink


def torch_prefill(q, kv, idx, sink, scale, chunk=1024):
    out = torch.empty_like(q)
    for s in range(0, q.shape[0], chunk):
        i = idx[s:s + chunk, 0]
        valid = (i >= 0) & (i < kv.shape[0])
        rows = kv[i.clamp(0, kv.shape[0] - 1).long(), 0]
        out[s:s + chunk] = torch_attend(q[s:s + chunk], rows, valid, sink, scale)
    return out


def bench_prefill(ceil, results, g):
    heads, scale = 128, 512 ** -0.5
    for tokens in (8192, 32768):
        q, kv, idx, lens, sink = prefill_inputs(tokens, heads, g)
        n = WINDOW + TOPK
        flops = tokens * 4 * heads * n * 512
        bytes_ = tokens * (n * (1024 + 4) + 2 * heads * 512 * 2 + 8 * heads)
        floor = max(bytes_ / ceil["copy_bytes_per_s"], flops / ceil["bf16_flops_per_s"])
        ours, _, _ = fm.flash_mla_sparse_fwd(q, kv, idx, scale, attn_sink=sink, topk_length=lens)
        sel = torch.randperm(tokens, device="cuda", generator=g)[:48]
        want, _, _ = ref.prefill(q[sel].cpu(), kv.cpu(), idx[sel].cpu(), lens[sel].cpu(), sink.cpu(), scale)
        rel = ((ours[sel].double().cpu() - want).norm() / want.norm()).item()
        assert rel < 1.5e-2 and not ours.isnan().any(), "prefill vs float64 reference: %.3g" % rel
        t_torch = do_bench(lambda: torch_prefill(q, kv, idx, sink, scale), rep=200) * 1e-3
        rows = [("%dx%d s%d (%s row)" % (c["block_h"], c["block_n"], c["num_stages"], sms), c)
                for sms, c in (("sm80", cfg.row(cfg.PREFILL, "sm80")),
                               ("sm86/89", cfg.row(cfg.PREFILL, "sm86")))]
        for label, conf in rows:
            got, _, _ = fm.flash_mla_sparse_fwd(q, kv, idx, scale, attn_sink=sink, topk_length=lens, tuning=cfg.Tuning(prefill=conf))
            vrel = ((got[sel].double().cpu() - want).norm() / want.norm()).item()
            assert vrel < 1.5e-2 and not got.isnan().any(), "%s vs float64 reference: %.3g" % (label, vrel)
            t = do_bench(lambda: fm.flash_mla_sparse_fwd(q, kv, idx, scale, attn_sink=sink, topk_length=lens,
                                                          decode=conf), rep=200) * 1e-3
            results.append(dict(op="prefill", tokens=tokens, heads=heads, variant=label, time_us=t * 1e6,
                                bytes_per_s=bytes_ / t, flops_per_s=flops / t, floor_us=floor * 1e6,
                                x_floor=t / floor, torch_us=t_torch * 1e6, speedup_vs_torch=t_torch / t,
                                rel_vs_ref=vrel))
            print(json.dumps(results[-1]), flush=True)
        del q, kv, idx
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--sweep", action="store_true", help="also time the decode candidates")
    p.add_argument("--decode-only", action="store_true")
    a = p.parse_args()
    global SWEEP
    SWEEP = a.sweep
    g = torch.Generator(device="cuda").manual_seed(0)
    t0 = time.time()
    ceil = ceilings()
    print(json.dumps(ceil), flush=True)
    results = []
    bench_decode(ceil, results, g)
    if not a.decode_only:
        bench_prefill(ceil, results, g)
    info = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=__import__("triton").__version__, ceilings=ceil, results=results,
                wall_s=time.time() - t0)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
