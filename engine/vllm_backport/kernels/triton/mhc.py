"""DeepSeek-V4's manifold-constrained hyper-connections (mHC) for sm80/86/89, in Triton: the
pre-norm projection GEMM, the pre mix (gates + Sinkhorn + stream collapse, optionally RMS-normed),
the post mix and the head collapse. Same arithmetic order as upstream's TileLang kernels
(vllm/model_executor/kernels/mhc/tilelang_kernels.py), which need a CUDA compiler at start-up.

Shapes: hc streams of hidden size H; x = the streams flattened [T, hc * H] (bf16); fn [N, K]
float32 with N = hc * (hc + 2) (pre: hc pre gates, hc post gates, hc x hc comb logits) or N = hc
(head); K = hc * H (or H for the layer-0 broadcast, whose streams are one embedding copied).
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne


@triton.jit
def _tf32_split(b):
    """b = hi + lo with hi exact in tf32 (10 mantissa bits); two tf32 products give ~21 bits."""
    hi = (b.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
    return hi, b - hi


@triton.jit
def prenorm_gemm_kernel(x_ptr, stride_xm, fn_ptr, stride_fn, out_ptr, sq_ptr, M, N, K, k_per_split,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr):
    """Split program_id(1) of out = x @ fn.T (float32 [splits, M, N]) and sq = sum x^2 ([splits, M])
    over its K range. x is bf16, exact in tf32; fn is split into two tf32 parts (DeepGEMM's kernel
    multiplies in plain tf32; this one keeps ~fp32 accuracy at twice the tensor-core work)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    n = tl.arange(0, BLOCK_N)
    nmask = n < N
    kk = tl.arange(0, BLOCK_K)
    k_lo = tl.program_id(1) * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    sq = tl.zeros((BLOCK_M,), tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + kk
        kmask = k < k_hi
        a = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xm + k[None, :], mask=rmask[:, None] & kmask[None, :],
                    other=0.0).to(tl.float32)
        b = tl.load(fn_ptr + n.to(tl.int64)[None, :] * stride_fn + k[:, None], mask=nmask[None, :] & kmask[:, None],
                    other=0.0)
        sq += tl.sum(a * a, 1)
        if DOT_F32:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            hi, lo = _tf32_split(b)
            acc = tl.dot(a, hi, acc, input_precision="tf32")
            acc = tl.dot(a, lo, acc, input_precision="tf32")
    s = tl.program_id(1).to(tl.int64)
    tl.store(out_ptr + (s * M + rows)[:, None] * N + n[None, :], acc, mask=rmask[:, None] & nmask[None, :])
    tl.store(sq_ptr + s * M + rows, sq, mask=rmask)


@triton.jit
def _mix_sums(mix_ptr, t, M, N, splits, cols, cmask, MAX_SPLITS: tl.constexpr):
    """sum over the splits of mixes[s, t, cols] (float32, cols 1-D): every split in one load, not one
    dependent load a split (a decode token's 32 splits took ~9 us a call that way)."""
    s = tl.arange(0, MAX_SPLITS)
    smask = s < splits
    v = tl.load(mix_ptr + (s[:, None] * M + t) * N + cols[None, :], mask=smask[:, None] & cmask[None, :], other=0.0)
    return tl.sum(v, 0)


@triton.jit
def _mix_sums_2d(mix_ptr, t, M, N, splits, cols, cmask, MAX_SPLITS: tl.constexpr):
    """_mix_sums for 2-D cols."""
    s = tl.arange(0, MAX_SPLITS)
    smask = s < splits
    v = tl.load(mix_ptr + (s[:, None, None] * M + t) * N + cols[None, :, :],
                mask=smask[:, None, None] & cmask[None, :, :], other=0.0)
    return tl.sum(v, 0)


@triton.jit
def _rstd(sq_ptr, t, M, splits, numel, eps, MAX_SPLITS: tl.constexpr):
    """rsqrt(sum over the splits of sq[s, t] / numel + eps)."""
    s = tl.arange(0, MAX_SPLITS)
    total = tl.sum(tl.load(sq_ptr + s * M + t, mask=s < splits, other=0.0), 0)
    return tl.rsqrt(total / numel + eps)


@triton.jit
def _row4(m, j, r: tl.constexpr):
    """The four entries of row r of a [4, 4] tensor, as scalars."""
    row = tl.sum(tl.where(j[:, None] == r, m, 0.0), 0)
    return (tl.sum(tl.where(j == 0, row, 0.0), 0), tl.sum(tl.where(j == 1, row, 0.0), 0),
            tl.sum(tl.where(j == 2, row, 0.0), 0), tl.sum(tl.where(j == 3, row, 0.0), 0))


@triton.jit
def _norm4(a, b, c, d, eps):
    s = a + b + c + d + eps
    return a / s, b / s, c / s, d / s


@triton.jit
def _store4(dst, a, b, c, d):
    tl.store(dst, a)
    tl.store(dst + 1, b)
    tl.store(dst + 2, c)
    tl.store(dst + 3, d)


@triton.jit
def _sinkhorn4_store(comb, j, dst, eps, repeat):
    """hc 4's Sinkhorn (a column normalisation, then repeat - 1 row + column rounds) on its 16
    entries held as scalars, stored row-major at dst: each of the ~40 dependent normalisations is
    register math in every thread, where the [4, 4] tensor form spent lane shuffles on each."""
    a0, a1, a2, a3 = _row4(comb, j, 0)
    b0, b1, b2, b3 = _row4(comb, j, 1)
    c0, c1, c2, c3 = _row4(comb, j, 2)
    d0, d1, d2, d3 = _row4(comb, j, 3)
    a0, b0, c0, d0 = _norm4(a0, b0, c0, d0, eps)
    a1, b1, c1, d1 = _norm4(a1, b1, c1, d1, eps)
    a2, b2, c2, d2 = _norm4(a2, b2, c2, d2, eps)
    a3, b3, c3, d3 = _norm4(a3, b3, c3, d3, eps)
    for _ in range(repeat - 1):
        a0, a1, a2, a3 = _norm4(a0, a1, a2, a3, eps)
        b0, b1, b2, b3 = _norm4(b0, b1, b2, b3, eps)
        c0, c1, c2, c3 = _norm4(c0, c1, c2, c3, eps)
        d0, d1, d2, d3 = _norm4(d0, d1, d2, d3, eps)
        a0, b0, c0, d0 = _norm4(a0, b0, c0, d0, eps)
        a1, b1, c1, d1 = _norm4(a1, b1, c1, d1, eps)
        a2, b2, c2, d2 = _norm4(a2, b2, c2, d2, eps)
        a3, b3, c3, d3 = _norm4(a3, b3, c3, d3, eps)
    _store4(dst, a0, a1, a2, a3)
    _store4(dst + 4, b0, b1, b2, b3)
    _store4(dst + 8, c0, c1, c2, c3)
    _store4(dst + 12, d0, d1, d2, d3)


@triton.jit
def _comb(mix_ptr, scale_ptr, base_ptr, comb_ptr, t, M, N, splits, rstd, sinkhorn_eps, repeat, j, jm,
          HC: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """Stores token t's comb[j, k]: softmax over k, then eps, then alternate column / row
    normalisations (repeat - 1 rounds after the first column one)."""
    jk = 2 * HC + j[:, None] * HC + j[None, :]
    m2 = jm[:, None] & jm[None, :]
    logits = _mix_sums_2d(mix_ptr, t, M, N, splits, jk, m2, MAX_SPLITS) * rstd * tl.load(scale_ptr + 2) + tl.load(
        base_ptr + jk, mask=m2, other=0.0)
    # Padding rows / columns (hc not a power of two) stay exactly zero and never divide by zero.
    logits = tl.where(m2, logits, float("-inf"))
    e = tl.where(m2, tl.exp(logits - tl.where(jm, tl.max(logits, 1), 0.0)[:, None]), 0.0)
    comb = tl.where(m2, e / tl.where(jm, tl.sum(e, 1), 1.0)[:, None] + sinkhorn_eps, 0.0)
    if HC == 4:
        _sinkhorn4_store(comb, j, comb_ptr + t * 16, sinkhorn_eps, repeat)
    else:
        comb = comb / (tl.sum(comb, 0)[None, :] + sinkhorn_eps)
        for _ in range(repeat - 1):
            comb = comb / (tl.sum(comb, 1)[:, None] + sinkhorn_eps)
            comb = comb / (tl.sum(comb, 0)[None, :] + sinkhorn_eps)
        tl.store(comb_ptr + t * HC * HC + j[:, None] * HC + j[None, :], comb, mask=m2)


@triton.jit
def mhc_pre_kernel(mix_ptr, sq_ptr, scale_ptr, base_ptr, x_ptr, stride_xt, stride_xj, post_ptr, comb_ptr, out_ptr,
                   w_ptr, res_out_ptr, M, splits, H, rms_numel, rms_eps, pre_eps, sinkhorn_eps, post_mult, repeat,
                   norm_eps, HC: tl.constexpr, HCP: tl.constexpr, BLOCK_H: tl.constexpr, HAS_NORM: tl.constexpr,
                   BROADCAST: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """Program axis 1: one program a token for the Sinkhorn-normalised comb (the last), and one for
    each BLOCK_H columns of the collapsed layer input sum_j pre_j * stream_j (bf16; RMS-normed with
    weight w when HAS_NORM, which needs the whole row in one program), the first of which also
    stores the post gates. The comb's ~40 dependent normalisations thus run beside the collapse,
    not before it. BROADCAST: every stream is x[t] (layer 0), also written out as the residual
    streams [T, HC, H]."""
    t = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    N: tl.constexpr = HC * (HC + 2)
    j = tl.arange(0, HCP)
    jm = j < HC
    rstd = _rstd(sq_ptr, t, M, splits, rms_numel, rms_eps, MAX_SPLITS)
    if block == tl.num_programs(1) - 1:
        _comb(mix_ptr, scale_ptr, base_ptr, comb_ptr, t, M, N, splits, rstd, sinkhorn_eps, repeat, j, jm, HC,
              MAX_SPLITS)
    else:
        pre = tl.sigmoid(_mix_sums(mix_ptr, t, M, N, splits, j, jm, MAX_SPLITS) * rstd * tl.load(scale_ptr) + tl.load(
            base_ptr + j, mask=jm, other=0.0)) + pre_eps
        post = tl.sigmoid(_mix_sums(mix_ptr, t, M, N, splits, HC + j, jm, MAX_SPLITS) * rstd * tl.load(scale_ptr + 1)
                          + tl.load(base_ptr + HC + j, mask=jm, other=0.0)) * post_mult
        tl.store(post_ptr + t * HC + j, post, mask=jm & (block == 0))

        # Collapse, in the stream order the TileLang kernels accumulate.
        h = block * BLOCK_H + tl.arange(0, BLOCK_H)
        hm = h < H
        acc = tl.zeros((BLOCK_H,), tl.float32)
        if BROADCAST:
            x = tl.load(x_ptr + t * stride_xt + h, mask=hm, other=0.0)
            for i in tl.static_range(HC):
                tl.store(res_out_ptr + (t * HC + i) * H + h, x, mask=hm)
            xf = x.to(tl.float32)
            for i in tl.static_range(HC):
                acc += tl.sum(tl.where(j == i, pre, 0.0), 0) * xf
        else:
            for i in tl.static_range(HC):
                x = tl.load(x_ptr + t * stride_xt + i * stride_xj + h, mask=hm, other=0.0).to(tl.float32)
                acc += tl.sum(tl.where(j == i, pre, 0.0), 0) * x
        out = bf16_rne(acc)
        if HAS_NORM:
            r = tl.rsqrt(tl.sum(acc * acc, 0) / H + norm_eps)
            out = bf16_rne(out * r * tl.load(w_ptr + h, mask=hm, other=0.0).to(tl.float32))
        tl.store(out_ptr + t * H + h, out.to(tl.bfloat16), mask=hm)


@triton.jit
def mhc_post_kernel(x_ptr, res_ptr, post_ptr, comb_ptr, out_ptr, H, HC: tl.constexpr, HCP: tl.constexpr,
                    BLOCK_H: tl.constexpr):
    """out[t, j, h] = post[t, j] * x[t, h] + sum_i comb[t, i, j] * residual[t, i, h] (bf16 out)."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = h < H
    j = tl.arange(0, HCP)
    jm = j < HC
    x = tl.load(x_ptr + t * H + h, mask=hm, other=0.0).to(tl.float32)
    acc = tl.load(post_ptr + t * HC + j, mask=jm, other=0.0)[:, None] * x[None, :]
    for i in tl.static_range(HC):
        c = tl.load(comb_ptr + t * HC * HC + i * HC + j, mask=jm, other=0.0)
        r = tl.load(res_ptr + (t * HC + i) * H + h, mask=hm, other=0.0).to(tl.float32)
        acc += c[:, None] * r[None, :]
    tl.store(out_ptr + (t * HC + j)[:, None] * H + h[None, :], bf16_rne(acc).to(tl.bfloat16),
             mask=jm[:, None] & hm[None, :])


@triton.jit
def hc_head_kernel(mix_ptr, sq_ptr, scale_ptr, base_ptr, x_ptr, out_ptr, M, splits, H, rms_eps, hc_eps,
                   HC: tl.constexpr, HCP: tl.constexpr, BLOCK_H: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """out[t] = sum_j (sigmoid(mix_j * rstd * scale + base_j) + eps) * x[t, j] (bf16 out)."""
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, HCP)
    jm = j < HC
    rstd = _rstd(sq_ptr, t, M, splits, HC * H, rms_eps, MAX_SPLITS)
    pre = tl.sigmoid(_mix_sums(mix_ptr, t, M, HC, splits, j, jm, MAX_SPLITS) * rstd * tl.load(scale_ptr) + tl.load(
        base_ptr + j, mask=jm, other=0.0)) + hc_eps
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = h < H
    acc = tl.zeros((BLOCK_H,), tl.float32)
    for i in tl.static_range(HC):
        x = tl.load(x_ptr + (t * HC + i) * H + h, mask=hm, other=0.0).to(tl.float32)
        acc += tl.sum(tl.where(j == i, pre, 0.0), 0) * x
    tl.store(out_ptr + t * H + h, bf16_rne(acc).to(tl.bfloat16), mask=hm)
