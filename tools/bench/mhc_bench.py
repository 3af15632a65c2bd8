"""DeepSeek-V4's mHC ops (Triton, in place of TileLang + DeepGEMM) on one GPU: correctness against
float64, then time against a float32 PyTorch formulation of the same math in the same run.

Per size (hc 4, hidden 4096, 1 to 8192 tokens): the layer-0 broadcast pre, the fused post + pre
between sublayers (what every layer runs twice), the head, and the DeepGEMM-contract prenorm GEMM
alone. The floor is the bytes each op must move (streams in/out, fn) over the copy rate.
Writes mhc.json / mhc.md to --out.

usage (repo root): PYTHONPATH=.:engine VLLM_BACKPORT_TARGET=sm80 python3 tools/bench/mhc_bench.py \
    --out DIR [--ptx sm80]
"""

import argparse

import torch

from kernels.testing import mhc_reference as ref
from tools.bench import bench_common as common
from vllm_backport.kernels import mhc_ops

EPS = (1e-6, 1e-6, 1e-6, 2.0, 20)
HC, HIDDEN = 4, 4096
# --sweep: the projection's K split choices (most splits, fewest block_k steps a split, decode tile's
# block_k) tried on the fused post + pre at up to SWEEP_MAX_TOKENS tokens.
SWEEP = [dict(max_split=ms, min_k_steps=steps, block_k=bk) for ms in (16, 32, 64, 128) for steps in (1, 2, 4)
         for bk in (64, 128)]
SWEEP_MAX_TOKENS = 64


def torch_gates(x, fn, s, b):
    rms, pre_eps, sink_eps, mult, repeat = EPS
    xf = x.float()
    mixes = (xf @ fn.T) * torch.rsqrt(xf.square().mean(1, keepdim=True) + rms)
    pre = torch.sigmoid(mixes[:, :HC] * s[0] + b[:HC]) + pre_eps
    post = torch.sigmoid(mixes[:, HC:2 * HC] * s[1] + b[HC:2 * HC]) * mult
    comb = torch.softmax(mixes[:, 2 * HC:].view(-1, HC, HC) * s[2] + b[2 * HC:].view(HC, HC), -1) + sink_eps
    comb = comb / (comb.sum(-2, keepdim=True) + sink_eps)
    for _ in range(repeat - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + sink_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + sink_eps)
    return pre, post, comb


def torch_collapse(res, pre, w):
    y = (pre[..., None] * res.float()).sum(1)
    if w is None:
        return y.bfloat16()
    return (y.to(torch.bfloat16).float() * torch.rsqrt(y.square().mean(1, keepdim=True) + 1e-6) * w.float()).bfloat16()


def torch_fused(x, res, post, comb, fn, s, b, w):
    # mhc_pre returns post as [T, hc, 1]; one gate per stream here.
    gate = post.reshape(post.shape[0], HC)[..., None]
    cur = (gate * x.float()[:, None] + torch.einsum("tij,tih->tjh", comb, res.float())).bfloat16()
    pre, post2, comb2 = torch_gates(cur.flatten(1), fn, s, b)
    return cur, post2, comb2, torch_collapse(cur, pre, w)


def sweep(run, check, row_conf):
    """[(graph us, choice)] of the fused post + pre under each SWEEP choice, fastest first; each
    choice's output checked first."""
    out = []
    for choice in SWEEP:
        conf = dict(row_conf, max_split=choice["max_split"], min_k_steps=choice["min_k_steps"],
                    gemm_small=dict(row_conf["gemm_small"], block_k=choice["block_k"]))
        mhc_ops._conf = lambda t, conf=conf: conf
        check(run())
        out.append((common.graph_us(run), choice))
    return sorted(out, key=lambda r: r[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_args(p)
    p.add_argument("--tokens", type=int, nargs="*", default=[1, 8, 64, 512, 4096, 8192])
    p.add_argument("--no-norm", action="store_true",
                   help="DeepSeek-V4's calls: no RMSNorm fused into the pre kernel (default: GLM-5.3's, fused)")
    p.add_argument("--pre-block-h", type=int, help="hidden columns per pre-kernel program in place of the SM "
                   "row's (the norm-free path only; 4096 = one program a token, as before the split)")
    p.add_argument("--sweep", action="store_true", help="also time the K split choices of SWEEP on the fused "
                   "post + pre at decode sizes (sweep column)")
    a = p.parse_args()
    row_conf = mhc_ops._conf
    if a.pre_block_h:
        mhc_ops._conf = lambda t: dict(row_conf(t), pre_block_h=a.pre_block_h)
    info, no_jit, bw = common.start(a, [mhc_ops])
    info.update(norm=not a.no_norm, pre_block_h=a.pre_block_h)
    rows = []
    for n, t in enumerate(a.tokens):
        g = torch.Generator().manual_seed(n)
        res = ref.streams(g, t, HC, HIDDEN).cuda()
        x = ref.streams(g, t, 1, HIDDEN)[:, 0].cuda()
        fn, s, b = (v.cuda() for v in ref.params(g, HC, HC * HIDDEN))
        w = None if a.no_norm else (1 + 0.3 * torch.randn(HIDDEN, generator=g)).bfloat16().cuda()
        fnb = fn.view(-1, HC, HIDDEN).sum(1)
        post, comb, _ = mhc_ops.mhc_pre(res, fn, s, b, *EPS, norm_weight=w)
        ops = {
            "broadcast_pre": (lambda: mhc_ops.mhc_pre_broadcast(x, fn, s, b, *EPS, norm_weight=w, fn_broadcast=fnb),
                              lambda: torch_collapse(x[:, None].expand(-1, HC, -1), torch_gates(x, fnb, s, b)[0], w),
                              t * HIDDEN * 2 * (1 + HC + 1) + fnb.numel() * 4),
            "fused_post_pre": (lambda: mhc_ops.mhc_fused_post_pre(x, res, post, comb, fn, s, b, *EPS, norm_weight=w),
                               lambda: torch_fused(x, res, post, comb, fn, s, b, w),
                               t * HIDDEN * 2 * (1 + 2 * HC + HC + 1) + fn.numel() * 4),
            "hc_head": (lambda: mhc_ops.hc_head_fused(res, fn[:HC], s[:1], b[:HC], 1e-6, 1e-6),
                        lambda: (torch.sigmoid((res.flatten(1).float() @ fn[:HC].T) * torch.rsqrt(
                            res.flatten(1).float().square().mean(1, keepdim=True) + 1e-6) * s[0] + b[:HC]) + 1e-6)
                        [..., None].mul(res.float()).sum(1).bfloat16(),
                        t * HIDDEN * 2 * (HC + 1) + fn[:HC].numel() * 4),
        }
        # Correctness of what is timed, against float64.
        if a.no_norm:  # layer 0's broadcast pre always normalises
            del ops["broadcast_pre"]
        else:
            want = ref.pre_broadcast(x, fnb, s, b, HC, EPS, w)
            ref.check("broadcast layer_input", ops["broadcast_pre"][0]()[3], want[3], 8e-3)
        cur, _, _, li = ops["fused_post_pre"][0]()
        ref.check("fused residual", cur, ref.post(x, res, post, comb), 8e-3)
        ref.check("fused layer_input", li, ref.pre(cur, fn, s, b, EPS, w)[2], 8e-3)
        ref.check("hc_head", ops["hc_head"][0](), ref.head(res, fn[:HC], s[:1], b[:HC], 1e-6, 1e-6), 8e-3)
        no_jit()
        for name, (ours, theirs, moved) in ops.items():
            t_ours, t_graph, t_torch = common.eager_us(ours), common.graph_us(ours), common.eager_us(theirs)
            t_torch_graph = common.graph_us(theirs)
            floor = moved / bw * 1e6
            rows.append(dict(op=name, tokens=t, ours_us=t_ours, ours_graph_us=t_graph, torch_us=t_torch,
                             torch_graph_us=t_torch_graph, speedup=t_torch / t_ours,
                             graph_speedup=None if None in (t_graph, t_torch_graph) else t_torch_graph / t_graph,
                             floor_us=floor, graph_x_floor=None if t_graph is None else t_graph / floor))
            print(rows[-1], flush=True)
        if a.sweep and t <= SWEEP_MAX_TOKENS:
            kept = mhc_ops._conf

            def check(outs):
                ref.check("fused layer_input", outs[3], ref.pre(cur, fn, s, b, EPS, w)[2], 8e-3)
            tried = sweep(ops["fused_post_pre"][0], check, kept(res))
            mhc_ops._conf = kept
            no_jit()
            fused = next(r for r in rows if r["op"] == "fused_post_pre" and r["tokens"] == t)
            fused.update(best_graph_us=tried[0][0], sweep="split<=%(max_split)d steps>=%(min_k_steps)d bk%(block_k)d"
                         % tried[0][1], sweep_all=tried)
        out = torch.empty(16, t, 24, device="cuda")
        sq = torch.empty(16, t, device="cuda")
        xf = res.flatten(1)
        gemm = lambda: mhc_ops.tf32_hc_prenorm_gemm(xf, fn, out, sq, 16)  # noqa: E731
        gemm()
        ref.check("prenorm gemm", out.sum(0), xf.double() @ fn.double().T, 5e-5)  # split tf32: 1.6e-5 on an H200
        rows.append(dict(op="prenorm_gemm_16_splits", tokens=t, ours_us=common.eager_us(gemm),
                         ours_graph_us=common.graph_us(gemm), torch_us=common.eager_us(lambda: xf.float() @ fn.T),
                         floor_us=(xf.numel() * 2 + fn.numel() * 4) / bw * 1e6))
        rows[-1]["speedup"] = rows[-1]["torch_us"] / rows[-1]["ours_us"]
        print(rows[-1], flush=True)
    common.write(a.out, "mhc", info, rows, ["op", "tokens", "ours_us", "ours_graph_us", "torch_us", "torch_graph_us",
                                           "speedup", "graph_speedup", "floor_us", "graph_x_floor", "best_graph_us",
                                           "sweep"])


if __name__ == "__main__":
    main()
