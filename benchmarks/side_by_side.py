#!/usr/bin/env python3
"""gradcomp's CPU codecs against PyTorch doing the same work on the same data, in one process.

For every row (a codec's encode, decode or decode-accumulate on 16M N(0, 1) fp32 values) it times
  torch eager     the best eager form: preallocated outputs and in-place / out= ops, no temporaries
                  that can be avoided;
  torch.compile   the same function compiled by inductor (CPU, default mode), outputs returned;
  gradcomp        gradcomp.Codec with preallocated outputs (the Python package, the same C++ kernels
                  as the C++ library);
each sample as a multiple of a memcpy of the same 64 MiB input (numpy.copyto) taken just before it in the
same process, at 1 and 2 threads (torch.set_num_threads and gradcomp's threads=), and reports the median
ratio of each. Every tool runs in processes of its own (--processes per tool, the tools alternating in
time), so one tool's thread pool never competes with another's (torch's OpenMP workers spin after each
parallel region, and this machine's two vCPUs share their caches and memory). torch's work is the codec's math without gradcomp's extras
(saturation count, NaN/Inf detection, wire headers), so a tie favours torch.

Also the small-tensor overhead: encode + decode of 1K, 4K and 64K values (fp16 and int8), in
microseconds per call pair, against torch eager doing the same work.

  .venv/bin/python benchmarks/side_by_side.py [--n 16777216] [--rounds 9] [--threads 1 2]
                                             [--rows fp16,int8,...] [--doc]

--doc writes the tables, with the machine's CPU, ISA and the command, between
<!-- side-by-side:table --> and <!-- /side-by-side:table --> in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import re
import statistics
import sys
import time

import numpy as np
import torch

import gradcomp

ROOT = pathlib.Path(__file__).resolve().parent.parent


# --- torch's forms of each codec's math ----------------------------------------------------------------

def _blocks(x, b):
    return x.view(-1, b)


def _block_amax(B, block):
    """The block views of x and of the scratch B.f32, and B.scale[block] holding each block's max |x|."""
    xb, tmp, s = _blocks(B.x, block), _blocks(B.f32, block), B.scale[block]
    torch.abs(xb, out=tmp)
    torch.amax(tmp, 1, keepdim=True, out=s)
    return xb, tmp, s


class Buffers:
    """Preallocated outputs for torch eager, sized for n values."""

    def __init__(self, x: torch.Tensor):
        n = x.numel()
        self.x = x
        self.f32 = torch.empty_like(x)
        self.acc = torch.zeros_like(x)
        self.h16 = torch.empty(n, dtype=torch.float16)
        self.b16 = torch.empty(n, dtype=torch.bfloat16)
        self.f8 = torch.empty(n, dtype=torch.float8_e4m3fn)
        self.f8e5 = torch.empty(n, dtype=torch.float8_e5m2)
        self.sixes = torch.empty(n // 4 * 3, dtype=torch.uint8)
        self.i8 = torch.empty(n, dtype=torch.int8)
        self.u8 = torch.empty(n, dtype=torch.uint8)
        self.bool = torch.empty(n, dtype=torch.bool)
        self.packed = torch.empty(n // 8, dtype=torch.uint8)
        self.nibbles = torch.empty(n // 2, dtype=torch.uint8)
        self.weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
        self.shifts = torch.arange(8, dtype=torch.uint8)
        self.scale = {b: torch.empty(n // b, 1) for b in (16, 32, 64, 128, 256, 512, 1024)}
        self.exponent = torch.empty(n // 32, 1, dtype=torch.int32)
        self.scale_codes = torch.empty(n // 32, 1, dtype=torch.uint8)
        self.crumbs = torch.empty(n // 4, dtype=torch.uint8)
        self.i64 = torch.empty(n, dtype=torch.int64)
        self.vals_t = torch.empty(0)   # the threshold codec's values (their count is the data's)
        # Set by prepare_inputs: each decode row's own encoded input, kept apart from the encoders' buffers.
        self.f8mx = self.s_mx8 = self.nib_mx4 = self.s_mx4 = self.nib_nv = self.s_nv = self.threshold = None
        self.six_mx6 = self.s_mx6 = self.nib_qsgd = self.s_qsgd = self.crumbs_tern = self.s_tern = None
        self.thr_idx = self.thr_vals = self.rk_idx = self.rk_vals = self.ob_pos = self.ob_neg = None
        self.packed_ob = self.vals_top = self.s128e5 = self.ob_diff = None
        self.generator = torch.Generator().manual_seed(1)
        k = max(1, n // 100)
        self.perm = torch.empty(n, dtype=torch.int64)
        self.topv = torch.empty(k)
        self.topi = torch.empty(k, dtype=torch.int64)
        self.vals = torch.empty(k)


def eager_cast_encode(dtype):
    def run(B):
        (B.h16 if dtype == torch.float16 else B.b16).copy_(B.x)
    return run


def eager_cast_decode(dtype, accumulate):
    def run(B):
        src = B.h16 if dtype == torch.float16 else B.b16
        if accumulate:
            B.acc.add_(src)
        else:
            B.f32.copy_(src)
    return run


# The block-scaled codecs' element limits: fp8 E4M3, fp8 E5M2, int8.
BLOCK_LIMITS = {"fp8": 448.0, "fp8e5m2": 57344.0, "int8": 127.0}


def _block_codes(B, kind):
    return {"fp8": B.f8, "fp8e5m2": B.f8e5, "int8": B.i8}[kind]


def eager_block_encode(kind, block):
    limit = BLOCK_LIMITS[kind]

    def run(B):
        xb, tmp, s = _block_amax(B, block)
        s.div_(limit)
        torch.div(xb, s, out=tmp)
        if kind != "int8":
            _block_codes(B, kind).copy_(B.f32)
        else:
            tmp.round_()
            B.i8.copy_(B.f32)
    return run


def eager_block_decode(kind, block, accumulate):
    def run(B):
        q = _block_codes(B, kind)
        s = B.scale[block]
        if accumulate:
            B.f32.copy_(q)
            _blocks(B.acc, block).addcmul_(_blocks(B.f32, block), s)
        else:
            B.f32.copy_(q)
            _blocks(B.f32, block).mul_(s)
    return run


def eager_int8_stochastic(B):
    xb, tmp, s = _block_amax(B, 256)
    s.div_(127.0)
    torch.div(xb, s, out=tmp)
    B.acc.uniform_()        # the dither (acc is scratch here)
    tmp.add_(_blocks(B.acc, 256)).floor_()
    B.i8.copy_(B.f32)


def eager_qsgd4(B):
    # Per block of 512: norm, level = floor(|x| / norm * 7 + u), code = level | sign << 3, two per byte.
    xb, tmp, s = _blocks(B.x, 512), _blocks(B.f32, 512), B.scale[512]
    torch.linalg.vector_norm(xb, dim=1, keepdim=True, out=s)
    torch.abs(xb, out=tmp)
    tmp.div_(s).mul_(7.0)
    B.acc.uniform_()
    tmp.add_(_blocks(B.acc, 512)).floor_()
    B.u8.copy_(B.f32)
    torch.lt(B.x, 0, out=B.bool)
    B.u8.bitwise_or_(B.bool.to(torch.uint8).bitwise_left_shift_(3))
    pairs = B.u8.view(-1, 2)
    torch.bitwise_or(pairs[:, 0], pairs[:, 1].bitwise_left_shift(4), out=B.nibbles)


def eager_sign_encode(B):
    xb, tmp, s = _blocks(B.x, 1024), _blocks(B.f32, 1024), B.scale[1024]
    torch.abs(xb, out=tmp)
    torch.mean(tmp, 1, keepdim=True, out=s)
    torch.lt(B.x, 0, out=B.bool)
    _pack_bits(B, B.bool)


def eager_sign_decode(accumulate):
    def run(B):
        _unpack_bits(B, B.packed)
        B.f32.mul_(-2.0).add_(1.0)   # bit 1 (negative) -> -1
        if accumulate:
            _blocks(B.acc, 1024).addcmul_(_blocks(B.f32, 1024), B.scale[1024])
        else:
            _blocks(B.f32, 1024).mul_(B.scale[1024])
    return run


def eager_topk(B):
    torch.abs(B.x, out=B.f32)
    torch.topk(B.f32, B.topv.numel(), sorted=False, out=(B.topv, B.topi))
    torch.gather(B.x, 0, B.topi, out=B.vals)


# The E2M1 grid's rounding midpoints: a value's code is the number of midpoints below it (torch has no
# CPU cast to fp4; ties here go to the lower code where RNE would take the even one at 0.75, 1.75 and 3.5,
# the same work either way: a search per element).
E2M1_MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def _pack_pairs(codes_u8, out):
    pairs = codes_u8.view(-1, 2)
    torch.bitwise_or(pairs[:, 0], pairs[:, 1].bitwise_left_shift(4), out=out)


def eager_mxfp8_encode(B):
    # OCP MX: per 32 values X = 2^(floor(log2 amax) - 8) as an E8M0 code, elements E4M3(x / X) saturated.
    xb, tmp, s = _block_amax(B, 32)
    torch.frexp(s, out=(B.scale[32], B.exponent))
    B.exponent.sub_(9)                       # frexp's exponent is floor(log2) + 1; emax(E4M3) = 8
    torch.ldexp(torch.ones_like(s), B.exponent, out=s)
    torch.div(xb, s, out=tmp)
    tmp.clamp_(-448.0, 448.0)
    B.f8.copy_(B.f32)
    torch.add(B.exponent, 127, out=B.exponent)
    B.scale_codes.copy_(B.exponent)


def _e2m1_codes(B):
    """B.f32 holds x / factor: its E2M1 codes (sign in bit 3), packed two a byte into B.nibbles."""
    tmp = B.f32
    torch.lt(tmp, 0, out=B.bool)
    tmp.abs_()
    torch.bucketize(tmp, E2M1_MIDPOINTS, out=B.i64)
    B.u8.copy_(B.i64)
    B.u8.bitwise_or_(B.bool.to(torch.uint8).bitwise_left_shift_(3))
    _pack_pairs(B.u8, B.nibbles)


def eager_mxfp4_encode(B):
    xb, tmp, s = _block_amax(B, 32)
    torch.frexp(s, out=(B.scale[32], B.exponent))
    B.exponent.sub_(3)                       # emax(E2M1) = 2
    torch.ldexp(torch.ones_like(s), B.exponent, out=s)
    torch.div(xb, s, out=tmp)
    _e2m1_codes(B)


def eager_nvfp4_encode(B):
    # NVFP4: t = amax / (6 x 448); per 16 values an E4M3 scale of amax_block / (6 t); elements E2M1(x / f).
    xb, tmp, s = _block_amax(B, 16)
    t = float(s.max()) / 2688.0
    s.div_(6.0 * t).clamp_(max=448.0)
    s.copy_(s.to(torch.float8_e4m3fn)).mul_(t)
    torch.div(xb, s, out=tmp)
    _e2m1_codes(B)


def eager_int4_encode(B):
    xb, tmp, s = _block_amax(B, 64)
    s.div_(7.0)
    torch.div(xb, s, out=tmp)
    tmp.round_().clamp_(-7.0, 7.0)
    B.i8.copy_(B.f32)
    B.i8.bitwise_and_(0xf)
    _pack_pairs(B.i8.view(torch.uint8), B.nibbles)


def eager_int4_decode(accumulate):
    def run(B):
        codes = B.i8.view(-1, 2)
        torch.bitwise_and(B.nibbles, 0xf, out=codes[:, 0].view(torch.uint8))
        torch.bitwise_right_shift(B.nibbles, 4, out=codes[:, 1].view(torch.uint8))
        B.i8.bitwise_xor_(8).sub_(8)         # sign-extend the nibbles
        B.f32.copy_(B.i8)
        if accumulate:
            _blocks(B.acc, 64).addcmul_(_blocks(B.f32, 64), B.scale[64])
        else:
            _blocks(B.f32, 64).mul_(B.scale[64])
    return run


def eager_terngrad_encode(B):
    # TernGrad: per 512 values m = max |x|; code 1 (+m) or 2 (-m) with probability |x| / m, else 0; 4 a byte.
    xb, tmp, s = _block_amax(B, 512)
    tmp.div_(s)
    B.acc.uniform_()
    torch.lt(B.acc, B.f32, out=B.bool)       # nonzero with probability |x| / m
    B.u8.copy_(B.bool)
    torch.lt(B.x, 0, out=B.bool)
    B.u8.bitwise_left_shift_(B.bool.to(torch.uint8))   # 1 -> 2 for negative values
    q = B.u8.view(-1, 4)
    torch.bitwise_or(q[:, 0], q[:, 1].bitwise_left_shift(2), out=B.crumbs)
    B.crumbs.bitwise_or_(q[:, 2].bitwise_left_shift(4)).bitwise_or_(q[:, 3].bitwise_left_shift(6))


# E2M1's 16 codes (sign in bit 3) as values: the fp4 decoders' table.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _scaled_table_lookup(B, table, block, s, accumulate):
    """B.u8 holds codes: decode them through `table`, times each block's scale s (into B.f32, or added to
    B.acc)."""
    B.i64.copy_(B.u8)
    torch.index_select(table, 0, B.i64, out=B.f32)
    if accumulate:
        _blocks(B.acc, block).addcmul_(_blocks(B.f32, block), s)
    else:
        _blocks(B.f32, block).mul_(s)


def eager_fp4_decode(packed_name, scale_name, block, accumulate, table=E2M1_VALUES):
    """Two 4-bit codes a byte (low nibble first) through a 16-entry table: E2M1 (MX / NVFP4) or QSGD's."""
    def run(B):
        packed, s = getattr(B, packed_name), getattr(B, scale_name)
        pairs = B.u8.view(-1, 2)
        torch.bitwise_and(packed, 0xf, out=pairs[:, 0])
        torch.bitwise_right_shift(packed, 4, out=pairs[:, 1])
        _scaled_table_lookup(B, table, block, s, accumulate)
    return run


# QSGD 4-bit's 16 codes (level | sign << 3) as multiples of the block norm: +-level / 7.
QSGD4_VALUES = torch.tensor([l / 7.0 for l in range(8)] + [-l / 7.0 for l in range(8)])
# TernGrad's 2-bit codes as multiples of the block maximum: 0, +1, -1 (code 3 is invalid on the wire).
TERNGRAD_VALUES = torch.tensor([0.0, 1.0, -1.0, 0.0])


def eager_terngrad_decode(accumulate):
    def run(B):
        q = B.u8.view(-1, 4)
        for j in range(4):
            torch.bitwise_right_shift(B.crumbs_tern, 2 * j, out=q[:, j])
        B.u8.bitwise_and_(3)
        _scaled_table_lookup(B, TERNGRAD_VALUES, 512, B.s_tern, accumulate)
    return run


# E2M3 (MXFP6's default element): its 32 magnitudes in code order (subnormals m/8, then 2^(e-1) (1 + m/8)),
# the midpoints between them (a magnitude's code is the number of midpoints below it; ties go to the
# lower code where RNE would take the even one, the same work either way) and the 64 signed values.
E2M3_MAGNITUDES = [m / 8.0 for m in range(8)] + [2.0 ** (e - 1) * (1 + m / 8.0) for e in (1, 2, 3) for m in range(8)]
E2M3_MIDPOINTS = torch.tensor([(a + b) / 2 for a, b in zip(E2M3_MAGNITUDES, E2M3_MAGNITUDES[1:])])
E2M3_VALUES = torch.tensor(E2M3_MAGNITUDES + [-v for v in E2M3_MAGNITUDES])


def eager_mxfp6_encode(B):
    # OCP MX with E2M3 elements (emax 2): codes sign << 5 | magnitude code, four 6-bit codes in 3 bytes.
    xb, tmp, s = _block_amax(B, 32)
    torch.frexp(s, out=(B.scale[32], B.exponent))
    B.exponent.sub_(3)
    torch.ldexp(torch.ones_like(s), B.exponent, out=s)
    torch.div(xb, s, out=tmp)
    torch.lt(B.f32, 0, out=B.bool)
    B.f32.abs_()
    torch.bucketize(B.f32, E2M3_MIDPOINTS, out=B.i64)
    B.u8.copy_(B.i64)
    B.u8.bitwise_or_(B.bool.to(torch.uint8).bitwise_left_shift_(5))
    q, out = B.u8.view(-1, 4), B.sixes.view(-1, 3)
    torch.bitwise_or(q[:, 0], q[:, 1].bitwise_left_shift(6), out=out[:, 0])
    torch.bitwise_or(q[:, 1].bitwise_right_shift(2), q[:, 2].bitwise_left_shift(4), out=out[:, 1])
    torch.bitwise_or(q[:, 2].bitwise_right_shift(4), q[:, 3].bitwise_left_shift(2), out=out[:, 2])


def eager_mxfp6_decode(accumulate):
    def run(B):
        six, q = B.six_mx6.view(-1, 3), B.u8.view(-1, 4)
        torch.bitwise_and(six[:, 0], 63, out=q[:, 0])
        torch.bitwise_or(six[:, 0].bitwise_right_shift(6), six[:, 1].bitwise_and(15).bitwise_left_shift(2),
                         out=q[:, 1])
        torch.bitwise_or(six[:, 1].bitwise_right_shift(4), six[:, 2].bitwise_and(3).bitwise_left_shift(4),
                         out=q[:, 2])
        torch.bitwise_right_shift(six[:, 2], 2, out=q[:, 3])
        _scaled_table_lookup(B, E2M3_VALUES, 32, B.s_mx6, accumulate)
    return run


def _pack_bits(B, flags_bool):
    """Eight flags a byte, LSB first, into B.packed."""
    torch.mul(flags_bool.view(-1, 8), B.weights, out=B.u8.view(-1, 8))
    torch.sum(B.u8.view(-1, 8), 1, dtype=torch.uint8, out=B.packed)


def _unpack_bits(B, packed):
    """B.packed's bits, LSB first, as 0 / 1 in B.f32."""
    torch.bitwise_right_shift(packed.unsqueeze(1), B.shifts, out=B.u8.view(-1, 8))
    B.u8.bitwise_and_(1)
    B.f32.copy_(B.u8)


def eager_onebit_encode(B):
    # 1-bit SGD: per 1024 values, the mean of the non-negative and the mean of the negative ones; bit x >= 0.
    xb, s_pos = _blocks(B.x, 1024), B.scale[1024]
    torch.ge(B.x, 0, out=B.bool)
    torch.clamp(B.x, min=0, out=B.f32)
    torch.sum(_blocks(B.f32, 1024), 1, keepdim=True, out=s_pos)
    s_neg = xb.sum(1, keepdim=True).sub_(s_pos)
    count = B.bool.view(-1, 1024).sum(1, keepdim=True)
    s_pos.div_(count.clamp(min=1))
    s_neg.div_((1024 - count).clamp_(min=1))
    _pack_bits(B, B.bool)
    B.ob_pos_out, B.ob_neg_out = s_pos, s_neg


def eager_onebit_decode(accumulate):
    def run(B):
        _unpack_bits(B, B.packed_ob)       # 1: the non-negative group
        f = _blocks(B.f32, 1024)
        f.mul_(B.ob_diff).add_(B.ob_neg)   # neg + bit * (pos - neg)
        if accumulate:
            B.acc.add_(B.f32)
    return run


def eager_sparse_decode(index_name, values_name, accumulate):
    """An index-value payload (top-k, threshold, random-k) scattered into the output (zeroed first) or
    added to the accumulator."""
    def run(B):
        idx, vals = getattr(B, index_name), getattr(B, values_name)
        if accumulate:
            B.acc.index_add_(0, idx, vals)
        else:
            B.f32.zero_()
            B.f32.index_copy_(0, idx, vals)
    return run


def eager_randomk_encode(B):
    # k distinct coordinates (a random permutation's first k: the form GRACE and most random-k code use)
    # and their values. gradcomp draws them from a keyed Feistel permutation, without materializing it.
    k = B.topv.numel()
    torch.randperm(B.x.numel(), generator=B.generator, out=B.perm)
    torch.index_select(B.x, 0, B.perm[:k], out=B.vals)


def eager_mxfp8_decode(accumulate):
    def run(B):
        B.f32.copy_(B.f8mx)
        if accumulate:
            _blocks(B.acc, 32).addcmul_(_blocks(B.f32, 32), B.s_mx8)
        else:
            _blocks(B.f32, 32).mul_(B.s_mx8)
    return run


def eager_threshold(B):
    # Every |x| at or above a given threshold (gradcomp estimates its own from a sample first), with
    # its index: a mask, the indices, the values.
    torch.abs(B.x, out=B.f32)
    torch.ge(B.f32, B.threshold, out=B.bool)
    idx = B.bool.nonzero().squeeze(1)
    torch.index_select(B.x, 0, idx, out=B.vals_t)


# torch.compile forms: pure functions (inductor allocates its outputs).

def c_cast(dtype):
    return lambda x: x.to(dtype)


def c_uncast(accumulate):
    return (lambda h, acc: acc + h.to(torch.float32)) if accumulate else (lambda h, acc: h.to(torch.float32))


def c_block_encode(kind, block):
    limit = BLOCK_LIMITS[kind]
    dtype = {"fp8": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}.get(kind)

    def f(x):
        xb = x.view(-1, block)
        s = xb.abs().amax(1, keepdim=True) / limit
        q = xb / s
        return (q.to(dtype) if dtype is not None else torch.round(q).to(torch.int8)), s
    return f


def c_block_decode(block, accumulate):
    def f(q, s, acc):
        y = (q.to(torch.float32).view(-1, block) * s).view(-1)
        return acc + y if accumulate else y
    return f


def c_int8_stochastic(x):
    xb = x.view(-1, 256)
    s = xb.abs().amax(1, keepdim=True) / 127.0
    return torch.floor(xb / s + torch.rand_like(xb)).to(torch.int8), s


def c_qsgd4(x):
    xb = x.view(-1, 512)
    norm = torch.linalg.vector_norm(xb, dim=1, keepdim=True)
    level = torch.floor(xb.abs() / norm * 7.0 + torch.rand_like(xb)).to(torch.uint8)
    code = (level | ((xb < 0).to(torch.uint8) << 3)).view(-1, 2)
    return code[:, 0] | (code[:, 1] << 4), norm


def c_sign_encode(x):
    xb = x.view(-1, 1024)
    s = xb.abs().mean(1, keepdim=True)
    w = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
    return ((x < 0).view(-1, 8).to(torch.uint8) * w).sum(1, dtype=torch.uint8), s


def c_sign_decode(accumulate):
    def f(packed, s, acc):
        bits = (packed.unsqueeze(1) >> torch.arange(8, dtype=torch.uint8)) & 1
        y = ((1.0 - 2.0 * bits.to(torch.float32)).view(-1, 1024) * s).view(-1)
        return acc + y if accumulate else y
    return f


def c_mx_encode(fp4):
    def f(x):
        xb = x.view(-1, 32)
        e = torch.frexp(xb.abs().amax(1, keepdim=True)).exponent - (3 if fp4 else 9)
        q = xb / torch.ldexp(torch.ones_like(xb[:, :1]), e)
        if not fp4:
            return q.clamp(-448.0, 448.0).to(torch.float8_e4m3fn), (e + 127).to(torch.uint8)
        code = torch.bucketize(q.abs(), E2M1_MIDPOINTS).to(torch.uint8) | ((q < 0).to(torch.uint8) << 3)
        pairs = code.view(-1, 2)
        return pairs[:, 0] | (pairs[:, 1] << 4), (e + 127).to(torch.uint8)
    return f


def c_nvfp4_encode(x):
    xb = x.view(-1, 16)
    amax = xb.abs().amax(1, keepdim=True)
    t = amax.max() / 2688.0
    f = (amax / (6.0 * t)).clamp(max=448.0).to(torch.float8_e4m3fn).to(torch.float32) * t
    q = xb / f
    code = torch.bucketize(q.abs(), E2M1_MIDPOINTS).to(torch.uint8) | ((q < 0).to(torch.uint8) << 3)
    pairs = code.view(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4), f


def c_int4_encode(x):
    xb = x.view(-1, 64)
    s = xb.abs().amax(1, keepdim=True) / 7.0
    code = (torch.round(xb / s).clamp(-7.0, 7.0).to(torch.int8) & 0xf).to(torch.uint8).view(-1, 2)
    return code[:, 0] | (code[:, 1] << 4), s


def c_int4_decode(accumulate):
    def f(packed, s, acc):
        codes = torch.stack(((packed & 0xf), (packed >> 4)), 1).to(torch.int8)
        y = (((codes ^ 8) - 8).to(torch.float32).view(-1, 64) * s).view(-1)
        return acc + y if accumulate else y
    return f


def c_terngrad_encode(x):
    xb = x.view(-1, 512)
    m = xb.abs().amax(1, keepdim=True)
    hit = (torch.rand_like(xb) < xb.abs() / m).to(torch.uint8)
    code = (hit << (xb < 0).to(torch.uint8)).view(-1, 4)
    return code[:, 0] | (code[:, 1] << 2) | (code[:, 2] << 4) | (code[:, 3] << 6), m


def c_fp4_decode(block, accumulate, table=E2M1_VALUES):
    def f(packed, s, acc):
        codes = torch.stack((packed & 0xf, packed >> 4), 1).view(-1).to(torch.int64)
        y = (table[codes].view(-1, block) * s).view(-1)
        return acc + y if accumulate else y
    return f


def c_terngrad_decode(accumulate):
    def f(crumbs, m, acc):
        codes = torch.stack([(crumbs >> (2 * j)) & 3 for j in range(4)], 1).view(-1).to(torch.int64)
        y = (TERNGRAD_VALUES[codes].view(-1, 512) * m).view(-1)
        return acc + y if accumulate else y
    return f


def c_mxfp6_encode(x):
    xb = x.view(-1, 32)
    e = torch.frexp(xb.abs().amax(1, keepdim=True)).exponent - 3
    q = xb / torch.ldexp(torch.ones_like(xb[:, :1]), e)
    code = (torch.bucketize(q.abs(), E2M3_MIDPOINTS).to(torch.uint8) | ((q < 0).to(torch.uint8) << 5)).view(-1, 4)
    packed = torch.stack((code[:, 0] | (code[:, 1] << 6), (code[:, 1] >> 2) | (code[:, 2] << 4),
                          (code[:, 2] >> 4) | (code[:, 3] << 2)), 1)
    return packed.view(-1), (e + 127).to(torch.uint8)


def c_mxfp6_decode(accumulate):
    def f(six, s, acc):
        b = six.view(-1, 3)
        codes = torch.stack((b[:, 0] & 63, (b[:, 0] >> 6) | ((b[:, 1] & 15) << 2),
                             (b[:, 1] >> 4) | ((b[:, 2] & 3) << 4), b[:, 2] >> 2), 1).view(-1).to(torch.int64)
        y = (E2M3_VALUES[codes].view(-1, 32) * s).view(-1)
        return acc + y if accumulate else y
    return f


def c_onebit_encode(x):
    xb = x.view(-1, 1024)
    nonneg = xb >= 0
    count = nonneg.sum(1, keepdim=True)
    pos = torch.where(nonneg, xb, 0.0).sum(1, keepdim=True)
    neg = xb.sum(1, keepdim=True) - pos
    w = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
    bits = (nonneg.view(-1, 8).to(torch.uint8) * w).sum(1, dtype=torch.uint8)
    return bits, pos / count.clamp(min=1), neg / (1024 - count).clamp(min=1)


def c_onebit_decode(accumulate):
    def f(packed, pos, neg, acc):
        bits = ((packed.unsqueeze(1) >> torch.arange(8, dtype=torch.uint8)) & 1).view(-1, 1024)
        y = torch.where(bits.bool(), pos, neg).view(-1)
        return acc + y if accumulate else y
    return f


def c_sparse_decode(accumulate):
    def f(idx, vals, acc):
        return acc.index_add(0, idx, vals) if accumulate else torch.zeros_like(acc).index_copy(0, idx, vals)
    return f


def c_randomk_encode(x):
    idx = torch.randperm(x.numel())[:max(1, x.numel() // 100)]
    return x[idx], idx


def c_threshold(x, t):
    idx = (x.abs() >= t).nonzero().squeeze(1)
    return x[idx], idx


# --- rows ------------------------------------------------------------------------------------------------

class Row:
    """One operation: its gradcomp call and torch's eager and compiled forms (None: no such form)."""

    def __init__(self, name, spec, op, eager, compiled, compiled_args):
        self.name, self.spec, self.op = name, spec, op
        self.eager, self.compiled, self.compiled_args = eager, compiled, compiled_args


def rows() -> list[Row]:
    f16, bf = torch.float16, torch.bfloat16
    out = []   # compiled_args: the names of the compiled form's arguments (_compiled_args resolves them)
    for label, spec, dt in (("fp16", "fp16", f16), ("bf16", "bf16", bf)):
        out += [Row(f"{label} encode", spec, "encode", eager_cast_encode(dt), c_cast(dt), ("x",)),
                Row(f"{label} decode", spec, "decode", eager_cast_decode(dt, False), c_uncast(False), (label, "acc")),
                Row(f"{label} decode-accumulate", spec, "accumulate", eager_cast_decode(dt, True), c_uncast(True),
                    (label, "acc"))]
    for label, spec, kind, block in (("fp8 e4m3 block-128", "fp8-e4m3", "fp8", 128),
                                     ("int8 block-256", "int8", "int8", 256)):
        out += [Row(f"{label} encode", spec, "encode", eager_block_encode(kind, block), c_block_encode(kind, block),
                    ("x",)),
                Row(f"{label} decode", spec, "decode", eager_block_decode(kind, block, False),
                    c_block_decode(block, False), (kind, f"s{block}", "acc")),
                Row(f"{label} decode-accumulate", spec, "accumulate", eager_block_decode(kind, block, True),
                    c_block_decode(block, True), (kind, f"s{block}", "acc"))]
    out += [Row("int8 stochastic rounding encode", "int8:rounding=stochastic", "encode", eager_int8_stochastic,
                c_int8_stochastic, ("x",)),
            Row("QSGD 4-bit encode", "qsgd:bits=4", "encode", eager_qsgd4, c_qsgd4, ("x",)),
            Row("sign encode", "sign", "encode", eager_sign_encode, c_sign_encode, ("x",)),
            Row("sign decode", "sign", "decode", eager_sign_decode(False), c_sign_decode(False),
                ("packed", "s1024", "acc")),
            Row("sign decode-accumulate", "sign", "accumulate", eager_sign_decode(True), c_sign_decode(True),
                ("packed", "s1024", "acc")),
            Row("exact top-k 1 % encode", "topk:ratio=0.01", "encode", eager_topk, None, ()),
            Row("mxfp8 e4m3 encode", "mxfp8", "encode", eager_mxfp8_encode, c_mx_encode(False), ("x",)),
            Row("mxfp4 encode", "mxfp4", "encode", eager_mxfp4_encode, c_mx_encode(True), ("x",)),
            Row("nvfp4 encode", "nvfp4", "encode", eager_nvfp4_encode, c_nvfp4_encode, ("x",)),
            Row("int4 block-64 encode", "int4", "encode", eager_int4_encode, c_int4_encode, ("x",)),
            Row("int4 block-64 decode", "int4", "decode", eager_int4_decode(False), c_int4_decode(False),
                ("nibbles", "s64", "acc")),
            Row("int4 block-64 decode-accumulate", "int4", "accumulate", eager_int4_decode(True), c_int4_decode(True),
                ("nibbles", "s64", "acc")),
            Row("terngrad encode", "terngrad", "encode", eager_terngrad_encode, c_terngrad_encode, ("x",)),
            Row("mxfp8 e4m3 decode", "mxfp8", "decode", eager_mxfp8_decode(False), c_block_decode(32, False),
                ("f8mx", "smx8", "acc")),
            Row("mxfp8 e4m3 decode-accumulate", "mxfp8", "accumulate", eager_mxfp8_decode(True),
                c_block_decode(32, True), ("f8mx", "smx8", "acc")),
            Row("mxfp4 decode", "mxfp4", "decode", eager_fp4_decode("nib_mx4", "s_mx4", 32, False),
                c_fp4_decode(32, False), ("nibmx4", "smx4", "acc")),
            Row("mxfp4 decode-accumulate", "mxfp4", "accumulate", eager_fp4_decode("nib_mx4", "s_mx4", 32, True),
                c_fp4_decode(32, True), ("nibmx4", "smx4", "acc")),
            Row("nvfp4 decode-accumulate", "nvfp4", "accumulate", eager_fp4_decode("nib_nv", "s_nv", 16, True),
                c_fp4_decode(16, True), ("nibnv", "snv", "acc")),
            Row("threshold 1 % encode", "threshold:ratio=0.01", "encode", eager_threshold, c_threshold, ("x", "thr"))]
    # The rows for the codecs and directions the table did not name.
    out += [Row(f"fp8 e5m2 block-128 {label}", "fp8-e5m2", op, eager, compiled, args)
            for label, op, eager, compiled, args in (
                ("encode", "encode", eager_block_encode("fp8e5m2", 128), c_block_encode("fp8e5m2", 128), ("x",)),
                ("decode", "decode", eager_block_decode("fp8e5m2", 128, False), c_block_decode(128, False),
                 ("fp8e5m2", "s128e5", "acc")),
                ("decode-accumulate", "accumulate", eager_block_decode("fp8e5m2", 128, True),
                 c_block_decode(128, True), ("fp8e5m2", "s128e5", "acc")))]
    for acc, label in ((False, "decode"), (True, "decode-accumulate")):
        op = "accumulate" if acc else "decode"
        out += [Row(f"QSGD 4-bit {label}", "qsgd:bits=4", op,
                    eager_fp4_decode("nib_qsgd", "s_qsgd", 512, acc, QSGD4_VALUES),
                    c_fp4_decode(512, acc, QSGD4_VALUES), ("nibqsgd", "sqsgd", "acc")),
                Row(f"terngrad {label}", "terngrad", op, eager_terngrad_decode(acc), c_terngrad_decode(acc),
                    ("crumbstern", "stern", "acc"))]
    out += [Row("mxfp6 e2m3 encode", "mxfp6", "encode", eager_mxfp6_encode, c_mxfp6_encode, ("x",)),
            Row("mxfp6 e2m3 decode", "mxfp6", "decode", eager_mxfp6_decode(False), c_mxfp6_decode(False),
                ("sixmx6", "smx6", "acc")),
            Row("mxfp6 e2m3 decode-accumulate", "mxfp6", "accumulate", eager_mxfp6_decode(True),
                c_mxfp6_decode(True), ("sixmx6", "smx6", "acc")),
            Row("nvfp4 decode", "nvfp4", "decode", eager_fp4_decode("nib_nv", "s_nv", 16, False),
                c_fp4_decode(16, False), ("nibnv", "snv", "acc")),
            Row("onebit encode", "onebit", "encode", eager_onebit_encode, c_onebit_encode, ("x",)),
            Row("onebit decode", "onebit", "decode", eager_onebit_decode(False), c_onebit_decode(False),
                ("packedob", "obpos", "obneg", "acc")),
            Row("onebit decode-accumulate", "onebit", "accumulate", eager_onebit_decode(True),
                c_onebit_decode(True), ("packedob", "obpos", "obneg", "acc")),
            Row("random-k 1 % encode", "randomk:ratio=0.01", "encode", eager_randomk_encode, c_randomk_encode,
                ("x",))]
    for label, spec, index, values in (("exact top-k 1 %", "topk:ratio=0.01", "topi", "vals_top"),
                                       ("threshold 1 %", "threshold:ratio=0.01", "thr_idx", "thr_vals"),
                                       ("random-k 1 %", "randomk:ratio=0.01", "rk_idx", "rk_vals")):
        for acc, what in ((False, "decode"), (True, "decode-accumulate")):
            out.append(Row(f"{label} {what}", spec, "accumulate" if acc else "decode",
                           eager_sparse_decode(index, values, acc), c_sparse_decode(acc), (index, values, "acc")))
    return out


def _compiled_args(B: Buffers, names) -> tuple:
    table = {"x": B.x, "acc": B.acc, "fp16": B.h16, "bf16": B.b16, "fp8": B.f8, "int8": B.i8,
             "packed": B.packed, "nibbles": B.nibbles, "s64": B.scale[64], "f8mx": B.f8mx, "smx8": B.s_mx8,
             "nibmx4": B.nib_mx4, "smx4": B.s_mx4, "nibnv": B.nib_nv, "snv": B.s_nv, "thr": B.threshold, "s128": B.scale[128], "s256": B.scale[256],
             "s1024": B.scale[1024], "fp8e5m2": B.f8e5, "s128e5": B.s128e5, "nibqsgd": B.nib_qsgd,
             "sqsgd": B.s_qsgd, "crumbstern": B.crumbs_tern, "stern": B.s_tern, "sixmx6": B.six_mx6,
             "smx6": B.s_mx6, "packedob": B.packed_ob, "obpos": B.ob_pos, "obneg": B.ob_neg, "topi": B.topi,
             "vals_top": B.vals_top, "thr_idx": B.thr_idx, "thr_vals": B.thr_vals, "rk_idx": B.rk_idx,
             "rk_vals": B.rk_vals}
    return tuple(table[n] for n in names)


# --- timing ----------------------------------------------------------------------------------------------

def gradcomp_call(row: Row, x: np.ndarray, threads: int):
    codec = gradcomp.Codec(row.spec)
    wire = np.empty(codec.max_encoded_bytes(x.size), dtype=np.uint8)
    used = codec.encode(x, wire, seed=1, threads=threads).wire_bytes
    y = np.zeros_like(x)
    if row.op == "encode":
        return lambda: codec.encode(x, wire, seed=1, threads=threads)
    payload = wire[:used]
    return lambda: codec.decode(payload, y, accumulate=row.op == "accumulate", threads=threads)


def prepare_inputs(B: Buffers):
    """Inputs of the decode forms: the encoded values (and scales) of B.x."""
    B.h16.copy_(B.x)
    B.b16.copy_(B.x)
    for kind, block in (("fp8", 128), ("int8", 256)):
        eager_block_encode(kind, block)(B)
    eager_sign_encode(B)
    eager_mxfp8_encode(B)
    B.f8mx, B.s_mx8 = B.f8.clone(), B.scale[32].clone()
    eager_mxfp4_encode(B)
    B.nib_mx4, B.s_mx4 = B.nibbles.clone(), B.scale[32].clone()
    eager_nvfp4_encode(B)
    B.nib_nv, B.s_nv = B.nibbles.clone(), B.scale[16].clone()
    eager_block_encode("fp8", 128)(B)   # the fp8 decode rows' input again (mxfp8 reused B.f8)
    eager_int4_encode(B)
    n, k = B.x.numel(), max(1, B.x.numel() // 100)
    B.threshold = torch.kthvalue(B.x.abs(), n - k + 1).values   # the top 1 %'s smallest magnitude
    eager_block_encode("fp8e5m2", 128)(B)
    B.s128e5 = B.scale[128].clone()
    eager_block_encode("fp8", 128)(B)   # B.scale[128] back to the e4m3 decode rows' scales
    eager_qsgd4(B)
    B.nib_qsgd, B.s_qsgd = B.nibbles.clone(), B.scale[512].clone()
    eager_int4_encode(B)                # B.nibbles back to the int4 decode rows' codes
    eager_terngrad_encode(B)
    B.crumbs_tern, B.s_tern = B.crumbs.clone(), B.scale[512].clone()
    eager_mxfp6_encode(B)
    B.six_mx6, B.s_mx6 = B.sixes.clone(), B.scale[32].clone()
    eager_mxfp8_encode(B)               # B.scale[32] is not read by a decode row; kept as mxfp8 left it
    eager_onebit_encode(B)
    B.packed_ob, B.ob_pos, B.ob_neg = B.packed.clone(), B.ob_pos_out.clone(), B.ob_neg_out.clone()
    B.ob_diff = B.ob_pos - B.ob_neg
    eager_sign_encode(B)                # B.packed and B.scale[1024] back to the sign decode rows' inputs
    eager_topk(B)
    B.vals_top = B.vals.clone()
    eager_threshold(B)
    B.thr_vals = B.vals_t.clone()
    B.thr_idx = (B.x.abs() >= B.threshold).nonzero().squeeze(1)
    eager_randomk_encode(B)
    B.rk_idx, B.rk_vals = B.perm[:k].clone(), B.vals.clone()
    eager_topk(B)                       # B.vals back to top-k's


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(fn, src: np.ndarray, dst: np.ndarray, rounds: int) -> list:
    """Ratios of `rounds` samples of fn, each over a memcpy of the same input taken just before it."""
    fn()   # warm-up: first touches, compilation, thread pools
    fn()
    out = []
    for _ in range(rounds):
        base = timed(lambda: np.copyto(dst, src))
        out.append(timed(fn) / base)
    return out


TOOLS = ("torch eager", "torch.compile", "gradcomp")


def worker(tool: str, threads: int, n: int, rounds: int, selected: list) -> dict:
    """One process, one tool: row name -> its ratios (a row without this tool's form is left out). Each
    tool runs in its own process, so one tool's thread pool (torch's OpenMP workers spin after a parallel
    region) never runs beside another's."""
    torch.set_num_threads(threads)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(n).astype(np.float32))
    B = Buffers(x)
    prepare_inputs(B)
    src, dst = x.numpy(), np.empty(n, dtype=np.float32)
    out = {}
    for row in selected:
        if tool == "gradcomp":
            fn = gradcomp_call(row, src, threads)
        elif tool == "torch eager":
            fn = (lambda r=row: r.eager(B))
        elif row.compiled is not None:
            compiled = torch.compile(row.compiled, dynamic=False)
            args = _compiled_args(B, row.compiled_args)
            fn = (lambda c=compiled, a=args: c(*a))
        else:
            continue
        out[row.name] = measure(fn, src, dst, rounds)
    return out


def run_workers(tools, threads: int, a, selected) -> dict:
    """`a.processes` processes per tool, the tools alternating in time; row -> tool -> median ratio."""
    import json
    import subprocess
    samples: dict = {}
    for _ in range(a.processes):
        for tool in tools:
            cmd = [sys.executable, __file__, "--worker", tool, "--threads", str(threads), "--n", str(a.n),
                   "--rounds", str(a.rounds), "--rows", ",".join(r.name for r in selected)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
            if done.returncode != 0:
                sys.exit(f"side_by_side: the {tool} worker failed:\n{done.stderr[-3000:]}")
            for name, ratios in json.loads(done.stdout.strip().splitlines()[-1]).items():
                samples.setdefault(name, {}).setdefault(tool, []).extend(ratios)
    return {name: {t: statistics.median(v) for t, v in per.items()} for name, per in samples.items()}


def small_overhead(threads: int, repeats: int = 2000) -> list[str]:
    """Encode + decode of small tensors, microseconds per pair (median of 5 batches of `repeats`). torch runs
    at the same thread count (its default would split a 64K-value op over every core)."""
    torch.set_num_threads(threads)
    lines = ["| values | fp16: torch eager | fp16: gradcomp | int8 block-256: torch eager | int8: gradcomp |",
             "|---|---|---|---|---|"]
    for n in (1024, 4096, 65536):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        B = Buffers(x)
        xn = x.numpy()
        cells = []
        for spec, eager in (("fp16", (eager_cast_encode(torch.float16), eager_cast_decode(torch.float16, False))),
                            ("int8", (eager_block_encode("int8", 256), eager_block_decode("int8", 256, False)))):
            codec = gradcomp.Codec(spec)
            wire = np.empty(codec.max_encoded_bytes(n), dtype=np.uint8)
            y = np.empty(n, dtype=np.float32)

            def g():
                used = codec.encode(xn, wire, threads=threads).wire_bytes
                codec.decode(wire[:used], y, threads=threads)

            def e():
                eager[0](B)
                eager[1](B)

            per = []
            for fn in (e, g):
                fn()
                batches = []
                for _ in range(5):
                    t = time.perf_counter()
                    for _ in range(repeats):
                        fn()
                    batches.append((time.perf_counter() - t) / repeats * 1e6)
                per.append(statistics.median(batches))
            cells += [f"{per[0]:.2f}", f"{per[1]:.2f}"]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def machine() -> str:
    flags = set()
    model = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2")
    return (f"{model}, {os.cpu_count()} CPUs, {isa}; gradcomp's kernel path: {gradcomp._C.cpu_path()}; "
            f"torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1 << 24)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rows", default="", help="comma-separated row-name substrings (default: every row)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (it compiles for minutes)")
    p.add_argument("--processes", type=int, default=3, help="processes per tool, alternating in time")
    p.add_argument("--doc", action="store_true", help="write the tables into docs/performance.md")
    p.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not (1 << 16 <= a.n <= 1 << 28) or a.n % 1024:
        p.error("--n must be a multiple of 1024 in [2^16, 2^28]")
    if not 1 <= a.rounds <= 1000:
        p.error("--rounds must be in [1, 1000]")
    if not 1 <= a.processes <= 100:
        p.error("--processes must be in [1, 100]")
    if any(not 1 <= t <= 256 for t in a.threads):
        p.error("--threads must be in [1, 256]")
    wanted = [w.strip() for w in a.rows.split(",") if w.strip()]
    selected = [r for r in rows() if not wanted or any(w in r.name for w in wanted)]
    if not selected:
        p.error(f"--rows {a.rows!r} matches no row")

    if a.worker:
        import json
        print(json.dumps(worker(a.worker, a.threads[0], a.n, a.rounds, selected)))
        return 0
    started = time.time()
    tools = [t for t in TOOLS if not (a.no_compile and t == "torch.compile")]
    table = {}
    for threads in a.threads:
        for name, m in run_workers(tools, threads, a, selected).items():
            table[(name, threads)] = m
            print(f"{name:<38} {threads}t  " + "  ".join(f"{t} {v:.2f}" for t, v in m.items()), flush=True)
    small = small_overhead(1)

    head = ["operation"] + [f"{t} ({th} thr.)" for th in a.threads for t in ("torch eager", "torch.compile", "gradcomp")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in selected:
        cells = [row.name]
        for th in a.threads:
            m = table[(row.name, th)]
            best = min(v for t, v in m.items() if t != "gradcomp")
            for t in ("torch eager", "torch.compile", "gradcomp"):
                v = m.get(t)
                text = "–" if v is None else f"{v:.2f}"
                if t == "gradcomp" and v is not None and v > best:
                    text = f"**{text}**"   # behind the best torch form
                cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    behind = [(r.name, th) for r in selected for th in a.threads
              if table[(r.name, th)]["gradcomp"] > min(v for t, v in table[(r.name, th)].items() if t != "gradcomp")]
    command = ".venv/bin/python benchmarks/side_by_side.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = [f"Machine: {machine()}.", "",
            f"`{command.strip()}` — {a.n} values; each tool in its own processes ({a.processes} per tool, the "
            f"tools alternating in time), {a.rounds} samples a row in each, every sample a multiple of a memcpy of "
            f"the same input taken just before it in the same process; the median of the {a.processes * a.rounds} "
            f"samples; {time.time() - started:.0f} s. Bold: gradcomp behind the best torch form "
            f"({len(behind)} of {len(selected) * len(a.threads)} cells).", ""] + lines + \
           ["", "Small tensors (1 thread): encode + decode, microseconds per call pair.", ""] + small
    print("\n".join(text))
    if a.doc:
        doc = ROOT / "docs" / "performance.md"
        begin, end = "<!-- side-by-side:table -->", "<!-- /side-by-side:table -->"
        body = doc.read_text()
        if begin not in body:
            sys.exit(f"side_by_side: no region {begin} in {doc}")
        doc.write_text(re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: begin + "\n" + "\n".join(text) +
                              "\n" + end, body, flags=re.S))
    return 0


if __name__ == "__main__":
    sys.exit(main())
