"""Checks that need a process group, run in spawned gloo ranks: `run_checks(world)` spawns `world`
processes once, each runs every check registered for that world size, and the results (one entry per
check: passed, or the failure on each rank) come back to pytest, which reports each check as its own
test. Each check gets a fresh subgroup (FSDP's meshes named after it), so one check's failure does not
leave the next one a broken group."""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import gc
import io
import json
import os
import socket
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gradcomp
import gradcomp.torch as gt
from gradcomp.torch._exchange import ExchangeStats

CHECKS: dict[str, tuple[Callable, tuple[int, ...]]] = {}


def check(*worlds: int):
    def register(fn):
        CHECKS[fn.__name__] = (fn, worlds)
        return fn
    return register


class Failed(AssertionError):
    pass


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise Failed(message)


# --- the models and the runs -------------------------------------------------------------------------
class Net(torch.nn.Module):
    """Weights above the default min_numel (1024) and biases below it, in two DDP buckets when small."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(40, 64)
        self.fc2 = torch.nn.Linear(64, 48)
        self.head = torch.nn.Linear(48, 10)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def make_net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def batches(rank: int, steps: int, seed: int = 7):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return [(torch.randn(16, 40, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(steps)]


def ddp_of(net, group, bucket_cap_mb: float = 25.0):
    return torch.nn.parallel.DistributedDataParallel(net, process_group=group, bucket_cap_mb=bucket_cap_mb)


def train(ddp, data, lr: float = 0.1, record_grads: bool = False):
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    grads = []
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        if record_grads:
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in ddp.parameters()]))
        opt.step()
    return grads, opt


def flat_params(m) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def same_on_all_ranks(t: torch.Tensor, group) -> bool:
    everyone = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, t.contiguous(), group=group)
    return all(torch.equal(everyone[0], e) for e in everyone)


def hooked(group, codec: str, ef: str = "none", bucket_cap_mb: float = 25.0, seed: int = 0, **kw):
    ddp = ddp_of(make_net(seed), group, bucket_cap_mb)
    state = gt.DDPState(ddp, codec=codec, error_feedback=ef, process_group=group, **kw)
    ddp.register_comm_hook(state, gt.ddp_hook)
    return ddp, state


def raises_on_every_rank(fn, exc_type, group) -> str:
    """Runs fn, which must raise exc_type (directly, or through DDP's backward, which re-raises a hook's
    error as a RuntimeError carrying its message and type name); returns the message after checking
    every rank saw one."""
    message = ""
    try:
        fn()
    except exc_type as e:  # noqa: PERF203
        message = str(e)
    except RuntimeError as e:
        if exc_type.__name__ in str(e):
            message = str(e)
        else:
            raise
    got = torch.tensor([1 if message else 0])
    dist.all_reduce(got, group=group)
    expect(int(got) == dist.get_world_size(group), f"{exc_type.__name__} raised on {int(got)} of "
           f"{dist.get_world_size(group)} ranks (this rank: {message or 'nothing'})")
    return message


def rejected(fn, needle: str, what: str) -> None:
    """fn must raise gradcomp.InvalidArgument with `needle` in its message."""
    try:
        fn()
    except gradcomp.InvalidArgument as e:
        expect(needle in str(e), str(e))
        return
    expect(False, f"{what} was accepted")


# --- the checks --------------------------------------------------------------------------------------
@check(2, 4)
def identity_codec_is_bit_exact_against_ddp_without_a_hook(rank, group):
    data = batches(rank, 4)
    ref, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    for ef in ("none", "ef"):
        ddp, _ = hooked(group, "none", ef, min_numel=0)
        got, _ = train(ddp, data, record_grads=True)
        for step, (a, b) in enumerate(zip(ref, got)):
            if dist.get_world_size(group) == 2:
                # Two addends: the sum is the same in any order, so gloo's and gradcomp's agree bitwise.
                expect(torch.equal(a, b), f"ef={ef} step {step}: max |diff| {float((a - b).abs().max())}")
            else:
                # Four: gloo's ring adds in another order than gradcomp's rank order; fp32 rounding only.
                expect(torch.allclose(a, b, rtol=0, atol=4 * 2**-24 * float(a.abs().max())),
                       f"ef={ef} step {step}: max |diff| {float((a - b).abs().max())}")


@check(2)
def steps_before_start_iter_are_ddps_own_all_reduce(rank, group):
    data = batches(rank, 3)
    ref, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    ddp, _ = hooked(group, "int8", "ef", start_iter=2)
    got, _ = train(ddp, data, record_grads=True)
    expect(torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1]), "steps 0 and 1 differ from DDP's")
    expect(not torch.equal(ref[2], got[2]), "step 2 should be compressed (int8) and differ")


@check(2)
def fp16_matches_torchs_fp16_compress_hook(rank, group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    data = batches(rank, 3)
    ref_ddp = ddp_of(make_net(), group)
    ref_ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    ref, _ = train(ref_ddp, data, record_grads=True)
    ddp, _ = hooked(group, "fp16", "none", min_numel=0)
    got, _ = train(ddp, data, record_grads=True)
    for step, (a, b) in enumerate(zip(ref, got)):
        # torch: round each gradient to fp16, sum in fp16, widen. gradcomp: round to fp16, sum in fp32,
        # round the mean to fp16. Each path rounds at most twice at fp16's 2^-11 relative spacing.
        bound = 4 * 2**-11 * (a.abs() + b.abs()) + 2**-24
        expect(bool(((a - b).abs() <= bound).all()), f"step {step}: max |diff| {float((a - b).abs().max())} "
               f"beyond 2 fp16 roundings")


CODECS = ["none", "fp16", "bf16", "fp8-e4m3", "int8", "int8:block=64,rounding=stochastic", "qsgd", "terngrad",
          "sign", "onebit", "topk:ratio=0.05", "topk:ratio=0.05,values=fp16", "threshold:ratio=0.05",
          "randomk:ratio=0.05", "randomk:ratio=0.05,values=fp16", "mxfp8", "mxfp6:elem=e3m2", "mxfp4", "nvfp4", "int4"]


@check(2, 4)
def every_codec_and_error_feedback_gives_the_same_result_on_every_rank(rank, group):
    data = batches(rank, 3)
    exact, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    for codec in CODECS:
        for ef in ("none", "ef"):
            ddp, state = hooked(group, codec, ef, min_numel=100)
            got, _ = train(ddp, data, record_grads=True)
            for step, g in enumerate(got):
                expect(bool(torch.isfinite(g).all()), f"{codec} ef={ef} step {step}: non-finite result")
                expect(same_on_all_ranks(g, group), f"{codec} ef={ef} step {step}: ranks hold different results")
            limits = {"none": 1e-6, "fp16": 1e-3, "bf16": 8e-3, "int8": 2e-2, "mxfp8": 8e-2, "nvfp4": 0.25, "int4": 0.3}
            if codec in limits:
                rel = float((got[0] - exact[0]).norm() / exact[0].norm())
                limit = limits[codec]
                expect(rel <= limit, f"{codec} ef={ef}: relative error {rel:.2e} against the exact mean > {limit}")
            expect(state.last_stats["bytes_sent"] > 0, f"{codec}: no bytes accounted")
            state.close()


@check(2, 4)
def scaled_error_feedback_keeps_an_unbiased_codec_contractive(rank, group):
    # qsgd at 4 bits (omega 2.61 on its 512-value blocks) is not contractive: the hook's plain ef warns
    # once, naming omega and ef:scale=auto; ef:scale=auto does not warn and its ranks agree. With the
    # same data its first reduced gradient is smaller: each compressed value goes out at 1 / (1 + omega)
    # of its size, the rest waits in the residual (here 0.87 of the exact mean's norm against plain ef's
    # 1.69, which qsgd's noise inflates).
    data = batches(rank, 3)
    exact, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    got = {}
    for ef in ("ef", "ef:scale=auto"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ddp, state = hooked(group, "qsgd", ef, min_numel=100)
            got[ef], _ = train(ddp, data, record_grads=True)
            state.wait()
        told = [str(w.message) for w in caught if "not contractive" in str(w.message)]
        if ef == "ef":
            expect(len(told) == 1 and "omega = 2.61" in told[0] and "ef:scale=auto" in told[0],
                   f"plain ef with qsgd: warnings {told}")
        else:
            expect(not told, f"ef:scale=auto warned: {told}")
            expect(state.residual_norm() > 0, "ef:scale=auto kept no residual")
        for step, g in enumerate(got[ef]):
            expect(bool(torch.isfinite(g).all()), f"qsgd {ef} step {step}: non-finite result")
            expect(same_on_all_ranks(g, group), f"qsgd {ef} step {step}: ranks hold different results")
        state.close()
    # One bucket per parameter from DDP's rebuild on (compression from step 2): the first bucket to arrive
    # holds only exact parameters (the head's, below min_numel 500), and the warning must still come once,
    # with the first compressed one.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ddp, state = hooked(group, "qsgd", "ef", min_numel=500, bucket_cap_mb=0.0001, start_iter=2)
        train(ddp, batches(rank, 4))
        state.wait()
        state.close()
    told = [str(w.message) for w in caught if "not contractive" in str(w.message)]
    expect(len(told) == 1, f"plain ef with qsgd, one bucket per parameter: {len(told)} warnings")
    plain, scaled = (float(got[ef][0].norm() / exact[0].norm()) for ef in ("ef", "ef:scale=auto"))
    expect(scaled < 0.75 * plain, f"ef:scale=auto's first step sent {scaled:.2f} of the exact norm, plain ef {plain:.2f}")
    rejected(lambda: gt.DDPState(None, codec="qsgd", error_feedback="ef:scale=0.5"), "ef:scale=auto",
             "error_feedback='ef:scale=0.5'")


@check(2, 4)
def ef21_returns_the_shared_estimate_and_matches_ddp_with_a_lossless_codec(rank, group):
    # ef21: each rank sends C(g - h), h += D(C(g - h)); the hook returns H + mean, kept as H. With the
    # lossless codec every step's result is the exact mean up to fp32 rounding (a wrong h, say never
    # moved, would count the previous gradients again); with int8 each rank holds the same H, which is
    # exactly the gradient DDP handed the optimizer, for every compressed parameter.
    data = batches(rank, 4)
    exact, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    # (relative errors seen at 2 and 4 ranks: none 1.5e-7, int8 2.2e-2, top-k 5 % 0.84: its estimate lags;
    # the lossless codec through each algorithm, random-k keeping every coordinate)
    for codec, limit, algorithm in (("none", 1e-6, "auto"), ("none", 1e-6, "allgather"),
                                    ("randomk:ratio=1,values=fp32", 1e-6, "auto"), ("int8", 3e-2, "auto"),
                                    ("topk:ratio=0.05", 1.0, "auto")):
        ddp, state = hooked(group, codec, "ef21", min_numel=100, algorithm=algorithm)
        got, _ = train(ddp, data, record_grads=True)
        state.wait()
        for step, g in enumerate(got):
            rel = float((g - exact[step]).norm() / exact[step].norm())
            expect(rel <= limit, f"{codec} ({algorithm}) ef21 step {step}: relative error {rel:.2e} against the "
                   f"exact mean > {limit}")
            expect(same_on_all_ranks(g, group), f"{codec} ef21 step {step}: ranks hold different results")
        shared = state.state_dict()["shared"]
        last = dict(zip((n for n, _ in ddp.module.named_parameters()),
                        torch.split(got[-1], [p.numel() for p in ddp.module.parameters()])))
        compressed = [n for n, p in ddp.module.named_parameters() if p.numel() >= 100]
        for name in last:
            want = last[name] if name in compressed else torch.zeros_like(last[name])  # exact ones keep none
            expect(torch.equal(shared[name], want), f"{codec} ef21: H of {name} is not the gradient returned")
        state.close()
    rejected(lambda: gt.DDPState(None, codec="int8", error_feedback="ef21", nonfinite="skip"), "skip",
             "ef21 with nonfinite='skip'")


@check(2, 4)
def ef21_sgdm_sends_the_momentum_estimate(rank, group):
    # ef21-sgdm: ef21 on v <- (1 - eta) v + eta g. With lr 0 the parameters never move, so the exact run's
    # mean gradients are this run's too, and with the lossless codec the hook must hand DDP the momentum
    # of the means, m <- (1 - eta) m + eta mean(g), at every step (up to fp32 rounding).
    data = batches(rank, 4)
    exact, _ = train(ddp_of(make_net(), group), data, lr=0.0, record_grads=True)
    sizes = [p.numel() for p in make_net().parameters()]
    ddp, state = hooked(group, "none", "ef21-sgdm:eta=0.5", min_numel=100)
    expect(state.config()["error_feedback"] == "ef21-sgdm:eta=0.5", state.config()["error_feedback"])
    got, _ = train(ddp, data, lr=0.0, record_grads=True)
    m = torch.zeros_like(exact[0])
    for step, (g, e) in enumerate(zip(got, exact)):
        m = 0.5 * m + 0.5 * e
        want = torch.cat([a if n >= 100 else b for n, a, b in zip(sizes, m.split(sizes), e.split(sizes))])
        rel = float((g - want).norm() / want.norm())
        expect(rel <= 1e-6, f"ef21-sgdm step {step}: {rel:.2e} from the momentum of the exact means")
    state.close()
    ddp, state = hooked(group, "int8", "ef21-sgdm", min_numel=100)
    got, _ = train(ddp, data, record_grads=True)
    for step, g in enumerate(got):
        expect(bool(torch.isfinite(g).all()) and same_on_all_ranks(g, group), f"int8 ef21-sgdm step {step}")
    expect(sorted(state.state_dict()["momentum"]) == sorted(n for n, _ in ddp.module.named_parameters()),
           "ef21-sgdm's momentum is not saved by parameter name")
    state.close()
    for bad, needle in (("ef21-sgdm:eta=0", "eta must be in (0, 1], got '0'"), ("ef21-sgdm:eta=1.5", "eta must be"),
                        ("ef21-sgdm:eta=x", "eta must be"), ("ef21-sgdm:beta=0.1", "unknown option 'beta=0.1'")):
        rejected(lambda: gt.DDPState(None, codec="int8", error_feedback=bad), needle, bad)


def local_gradients(rank: int, data) -> list[list[torch.Tensor]]:
    """Each step's gradient of every parameter on this rank alone (no DDP), with lr 0: what the hook's
    buckets hold before the reduction."""
    net = make_net()
    out = []
    for x, y in data:
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        out.append([p.grad.reshape(-1).clone() for p in net.parameters()])
    return out


@check(2, 4)
def dgc_is_the_policys_step_on_every_rank(rank, group):
    # The hook's dgc against the C++ DgcFeedback (gradcomp.ErrorFeedback) on the same local gradients
    # (lr 0: the parameters never move, so each rank's gradients are known without DDP): every step's
    # result is the mean over ranks of what each rank's policy decodes, with momentum correction, local
    # clipping to 0.05, momentum factor masking and the warm-up's larger k (25 %, then 6.25 %, then the
    # codec's 5 %), through allgather (top-k, threshold) and random-k's summed values (the policy keyed by
    # the hook's tensor ids, so that random-k draws the same coordinates). Relative errors seen: 0 at 2
    # ranks, 3e-8 at most at 4 (the sum's order); with top-k, a hook that never masks u is 0.89 off at
    # step 1, one without the warm-up 0.73 at step 0, one without the clipping 4.1 at step 0.
    W = dist.get_world_size(group)
    data = batches(rank, 6)
    spec = "dgc:momentum=0.9,clip=0.05,warmup=4"
    local = local_gradients(rank, data)
    named = list(make_net().named_parameters())
    sizes = [p.numel() for _, p in named]
    ids = [zlib.crc32(f"{name}@0".encode()) & 0x7FFFFFFF for name, _ in named]  # the hook's (Layout.parts)
    for codec_spec in ("topk:ratio=0.05", "threshold:ratio=0.05", "randomk:ratio=0.05"):
        ddp, state = hooked(group, codec_spec, spec, min_numel=100)
        expect(state.config()["error_feedback"] == spec, state.config()["error_feedback"])
        got, _ = train(ddp, data, lr=0.0, record_grads=True)
        codec = gradcomp.Codec(codec_spec)
        policy = gradcomp.ErrorFeedback(spec)
        for step, grads in enumerate(local):
            for i, g in enumerate(grads):
                if g.numel() < 100:
                    continue
                out = torch.zeros(policy.max_encoded_bytes(codec._c, g.numel(), step=step), dtype=torch.uint8)
                n = policy.compress_into(codec._c, g.numpy(), out.numpy(), rank=rank, step=step,
                                         tensor_id=ids[i]).encoded.wire_bytes
                mean = torch.from_numpy(codec.decode(out[:n].numpy()))
                dist.all_reduce(mean, group=group)
                mean /= W
                have = got[step].split(sizes)[i]
                rel = float((have - mean).norm() / mean.norm())
                expect(rel <= 1e-5, f"{codec_spec} dgc step {step}, {named[i][0]}: {rel:.2e} from the C++ policy's mean")
                if step == 0 and not codec_spec.startswith("randomk"):
                    # each rank sent a quarter of the parameter, its largest magnitudes (threshold: within
                    # 10 % of that count); the codec's own 5 % from step 2 on. (Random-k's quarter holds
                    # some of the gradients' exact zeros, ReLU's dead units: its bytes are checked below.)
                    least = -(-g.numel() // 4) if codec_spec.startswith("topk") else int(0.9 * g.numel() / 4)
                    expect(int((have != 0).sum()) >= least,
                           f"{codec_spec} dgc warm-up step 0: {int((have != 0).sum())} of {g.numel()} sent")
        for step, g in enumerate(got):
            expect(same_on_all_ranks(g, group), f"{codec_spec} dgc step {step}: ranks hold different results")
        momentum, residuals = state.state_dict()["momentum"], state.state_dict()["residuals"]
        for i, (name, p) in enumerate(named):
            if p.numel() >= 100:
                u, v = torch.from_numpy(policy.state(ids[i], 0)), torch.from_numpy(policy.state(ids[i], 1))
                mine = momentum[name].reshape(-1)
                expect(torch.allclose(mine, u, rtol=1e-5, atol=1e-8) and torch.equal(mine == 0, u == 0),
                       f"{codec_spec} dgc: the momentum of {name} is not the policy's (masked where sent)")
                expect(torch.allclose(residuals[name].reshape(-1), v, rtol=1e-5, atol=1e-8),
                       f"{codec_spec} dgc: v of {name} is not the policy's")
        state.close()
    # int8 through reduce-scatter (no warm-up: a dense codec sends everything): the ranks agree, the
    # bytes do not change. And the warm-up counts from start_iter; the exact steps before it carry no
    # momentum, which the hook says once.
    ddp, state = hooked(group, "int8", spec, min_numel=100)
    sent = []
    for x, y in data[:5]:
        g, _ = train(ddp, [(x, y)], lr=0.0, record_grads=True)
        expect(bool(torch.isfinite(g[0]).all()) and same_on_all_ranks(g[0], group), f"int8 dgc: {g[0]}")
        sent.append(state.last_stats["bytes_sent"])
    expect(len(set(sent)) == 1, f"int8 dgc: bytes per step {sent}")
    state.close()
    ddp, state = hooked(group, "randomk:ratio=0.05", spec, min_numel=100, start_iter=2)
    sent = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in data:
            train(ddp, [(x, y)], lr=0.0)
            sent.append(state.last_stats["bytes_sent"])
        state.wait()
    told = [str(w.message) for w in caught if "momentum" in str(w.message)]
    expect(len(told) == 1 and "start_iter=2" in told[0], f"dgc before start_iter: warnings {told}")
    expect(sent[2] > 2 * sent[3] > 2 * sent[4] and sent[4] == sent[5] and sent[0] == sent[1] > sent[2],
           f"random-k dgc warm-up from start_iter=2: bytes per step {sent}")
    state.close()
    rejected(lambda: gt.DDPState(None, codec="topk:ratio=0.05", error_feedback=spec, nonfinite="skip"), "skip",
             "dgc with nonfinite='skip'")
    rejected(lambda: gt.DDPState(None, codec="int8:rotate=hadamard", error_feedback=spec), "rotated codec",
             "dgc with a rotated codec")
    for bad, needle in (("dgc:momentum=1", "momentum must be in [0, 0.999999]"), ("dgc:clip=-1", "clip must be"),
                        ("dgc:warmup=2.5", "warmup must be an integer"), ("dgc:beta=0.1", "unknown option"),
                        ("dgc:clip=nan", "clip must be"), ("dgc:clip=1,clip=2", "clip is given twice")):
        rejected(lambda: gt.DDPState(None, codec="topk:ratio=0.05", error_feedback=bad), needle, bad)


@check(2, 4)
def randomk_averages_every_parameter_once(rank, group):
    # Random-k buckets send their exact parameters (below min_numel) through a reduce-scatter of their
    # own, which averages them, and sum the random-k values on the wire: only those are divided by the
    # world size afterwards (the exact ones were divided a second time before 2026-12-05). Keeping every
    # coordinate, the whole result is the exact mean; keeping 5 %, the exact parameters still are.
    # (Before the fix, every bias came back at 1 / W of its mean.)
    data = batches(rank, 2)
    exact, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    sizes = [p.numel() for p in make_net().parameters()]
    names = [n for n, _ in make_net().named_parameters()]
    for codec in ("randomk:ratio=1,values=fp32", "randomk:ratio=0.05"):
        ddp, state = hooked(group, codec, "none", min_numel=100)
        got, _ = train(ddp, data, record_grads=True)
        for step, g in enumerate(got):
            for name, a, b in zip(names, g.split(sizes), exact[step].split(sizes)):
                # (after a step of 5 %, the model differs from the exact run's: step 0 only)
                if codec.endswith("fp32") or (a.numel() < 100 and step == 0):
                    expect(torch.allclose(a, b, rtol=1e-5, atol=1e-7), f"{codec} step {step}: {name} is "
                           f"{float((a / b).median()):.3f} of the exact mean")
        state.close()


@check(2)
def statistics_count_the_bytes_each_algorithm_sends(rank, group):
    data = batches(rank, 3)   # the diagnosis needs two steps (a step's time is between two completions)
    ddp, state = hooked(group, "int8:block=256", "ef", min_numel=0, bucket_cap_mb=25)
    train(ddp, data)
    s = state.last_stats
    params = list(ddp.parameters())
    n = sum(p.numel() for p in params)

    def int8_wire(m):  # 48-byte header, one fp32 scale per 256 values, m codes, sections padded to 16
        pad = lambda b: -(-b // 16) * 16  # noqa: E731
        return 48 + pad(-(-m // 256) * 4) + pad(m)

    # One bucket; every parameter cut in two segments, one wire each; a message is a 32-byte header and
    # the wires (16-aligned). Each rank sends one message in the all_to_all and one in the all-gather,
    # both sized for the larger segment of every parameter.
    msg = 32 + sum(-(-int8_wire(-(-p.numel() // 2)) // 16) * 16 for p in params)
    msg = -(-msg // 16) * 16
    expect(s["bytes_sent"] == 2 * msg, f"bytes_sent {s['bytes_sent']}, expected {2 * msg}")
    expect(s["elements"] == n and s["compressed_elements"] == n, f"elements {s['elements']}")
    expect(abs(s["compression_ratio"] - (4 * n) / (2 * msg)) < 1e-9, f"ratio {s['compression_ratio']}")
    expect(s["codec_seconds"] > 0 and state.residual_norm() > 0, "codec time and residual norm must be positive")
    # The diagnosis (gradcomp.diagnose) from the step's times: fractions in [0, 1] that add up, a named
    # bottleneck, and the sentence a report prints.
    expect(0 < s["iteration_seconds"] and 0 <= s["exposed_seconds"] <= s["iteration_seconds"], f"times {s}")
    expect(0 <= s["comm_fraction"] <= 1 and abs(s["comm_fraction"] + s["scaling_efficiency"] - 1) < 1e-9,
           f"fractions {s['comm_fraction']}, {s['scaling_efficiency']}")
    expect(s["bottleneck"] in ("compute", "latency", "bandwidth", "codec", "overlap"), f"bottleneck {s['bottleneck']}")
    expect("scaling efficiency" in s["diagnosis"] and s["bottleneck"] + "-bound" in s["diagnosis"], s["diagnosis"])
    expect("model_step_ms" not in s, "no model_links: nothing modelled")
    state.close()

    # model_links: each step modelled on the named links (cost model wire time for these buckets).
    links = ["inter=1gbit/50us", "inter=10gbit/50us"]
    ddp, state = hooked(group, "int8:block=256", "ef", min_numel=0, model_links=links)
    train(ddp, data)
    s = state.last_stats
    m = s["model_step_ms"]
    compute_ms = 1e3 * (s["iteration_seconds"] - s["exposed_seconds"])
    expect(sorted(m) == sorted(links) and m[links[0]] > m[links[1]] >= compute_ms - 1e-9, f"modelled {m}")
    # A crafted codec-bound step (8 of 10 ms exposed, 6 ms of codec) on a link so fast that no codec pays:
    # the diagnosis names fp32 (none) from the cost model's candidates (no backward after the first bucket
    # to hide behind).
    fast = gt.DDPState(ddp, codec="int8:block=256", error_feedback="ef", process_group=group,
                       model_links=["inter=10000GB/0us"])
    now = time.perf_counter()
    fast._previous_step_done, fast._last_bucket_submitted = now - 0.010, now - 0.008
    fast._pending_stats = {"started": now - 0.008, "traffic": state._pending_stats["traffic"]}
    fast.last_stats = {}
    fast._diagnose(ExchangeStats(bytes_sent=1000, codec_seconds=0.006, comm_seconds=0.002))
    d = fast.last_stats
    expect(d["bottleneck"] == "codec" and "switch to codec none" in d["diagnosis"] and
           "modelled step per codec on this link" in d["diagnosis"], d["diagnosis"])
    rejected(lambda: gt.DDPState(ddp, codec="int8", process_group=group, model_links=["inter=fast"]), "'fast'",
             "a bad model link")


def _resume(group, rank, codec, ef, cap_before, cap_after, steps=6, cut=3):
    data = batches(rank, steps)
    full, state = hooked(group, codec, ef, bucket_cap_mb=cap_before, min_numel=100)
    train(full, data)
    reference = flat_params(full)
    state.close()
    first, state = hooked(group, codec, ef, bucket_cap_mb=cap_before, min_numel=100)
    _, opt = train(first, data[:cut])
    blob = io.BytesIO()
    torch.save({"model": first.module.state_dict(), "hook": state.state_dict()}, blob)
    state.close()
    blob.seek(0)
    saved = torch.load(blob, weights_only=False)
    second, state2 = hooked(group, codec, ef, bucket_cap_mb=cap_after, min_numel=100, seed=99)
    second.module.load_state_dict(saved["model"])
    state2.load_state_dict(saved["hook"])
    train(second, data[cut:])
    return reference, flat_params(second)


@check(2, 4)
def resume_on_a_new_ddp_instance_continues_bitwise(rank, group):
    for codec, ef in (("int8", "ef"), ("topk:ratio=0.05", "ef"), ("int8:rounding=stochastic", "ef"),
                      ("qsgd", "ef:scale=auto"), ("int8", "ef21"), ("int8", "ef21-sgdm:eta=0.5"),
                      ("topk:ratio=0.05", "dgc:momentum=0.9,clip=0,warmup=4"), ("int8", "dgc")):
        a, b = _resume(group, rank, codec, ef, 25, 25)
        expect(torch.equal(a, b), f"{codec} ef={ef}: resumed parameters differ (max {float((a - b).abs().max())})")


@check(2, 4)
def resume_with_other_buckets_continues_bitwise(rank, group):
    # Residuals are stored by parameter name and every parameter is encoded on its own, so a run resumed
    # on a DDP instance with other buckets (a changed bucket_cap_mb; the rebuild after its first step)
    # gives the same bytes and the same parameters as the uninterrupted run.
    for codec, ef, before, after in (("int8", "ef", 25, 0.001), ("topk:ratio=0.05", "ef", 0.001, 25),
                                     ("fp8-e4m3", "ef", 25, 0.002), ("int8", "ef21", 25, 0.001),
                                     ("topk:ratio=0.05", "ef21", 0.001, 25), ("qsgd", "ef:scale=auto", 25, 0.001),
                                     ("topk:ratio=0.05", "dgc:momentum=0.9,clip=0,warmup=4", 0.001, 25)):
        a, b = _resume(group, rank, codec, ef, before, after)
        expect(torch.equal(a, b), f"{codec} ef={ef} buckets {before} -> {after} MB: parameters differ "
               f"(max {float((a - b).abs().max())})")


def powersgd_hooked(group, bucket_cap_mb: float = 25.0, seed: int = 0, **kw):
    ddp = ddp_of(make_net(seed), group, bucket_cap_mb)
    state = gt.PowerSGDState(ddp, process_group=group, **kw)
    ddp.register_comm_hook(state, gt.powersgd_hook)
    return ddp, state


@check(2, 4)
def powersgd_hook_is_the_same_on_every_rank_exact_before_start_iter_and_learns(rank, group):
    data = batches(rank, 8)
    exact, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    ddp, state = powersgd_hooked(group, rank=2, start_iter=2)
    got, _ = train(ddp, data, record_grads=True)
    for step, g in enumerate(got):
        expect(same_on_all_ranks(g, group), f"powersgd step {step}: ranks hold different gradients")
        expect(bool(torch.isfinite(g).all()), f"powersgd step {step}: non-finite")
    for step in (0, 1):  # before start_iter: DDP's exact mean (up to the order of gloo's sum)
        rel = float((got[step] - exact[step]).norm() / exact[step].norm())
        expect(rel < 1e-6, f"powersgd step {step} (before start_iter): {rel:.2e} from DDP")
    expect(not torch.equal(got[3], exact[3]), "powersgd step 3 should be a low-rank approximation")
    expect(state.last_stats["compressed"] == 3, f"the three weight matrices are compressed, got {state.last_stats}")
    full = sum(p.numel() for p in ddp.parameters())
    expect(state.last_stats["elements_sent"] < full / 3, f"sent {state.last_stats['elements_sent']} of {full}")


@check(2)
def powersgd_hook_resumes_bitwise_on_a_new_ddp_instance_with_other_buckets(rank, group):
    # Q and the residuals are kept by parameter name: a run resumed with another bucket_cap_mb (other
    # buckets) continues bitwise. (At 2 ranks gloo's sums are a + b whatever the buffer; at more ranks its
    # ring may add in another order for another buffer layout, so this is checked at 2.)
    data = batches(rank, 6)
    full, _ = powersgd_hooked(group, rank=2, start_iter=1)
    train(full, data)
    reference = flat_params(full)
    first, state = powersgd_hooked(group, rank=2, start_iter=1)
    train(first, data[:3])
    blob = io.BytesIO()
    torch.save({"model": first.module.state_dict(), "hook": state.state_dict()}, blob)
    blob.seek(0)
    saved = torch.load(blob, weights_only=False)
    second, state2 = powersgd_hooked(group, bucket_cap_mb=0.002, seed=99, rank=2, start_iter=1)
    second.module.load_state_dict(saved["model"])
    state2.load_state_dict(saved["hook"])
    train(second, data[3:])
    resumed = flat_params(second)
    expect(torch.equal(reference, resumed), f"powersgd resumed parameters differ (max {float((reference - resumed).abs().max())})")
    bad = {**saved["hook"], "config": {**saved["hook"]["config"], "rank": 4}}
    rejected(lambda: state2.load_state_dict(bad), "rank: saved 4, now 2", "a state of another rank")


@check(2)
def powersgd_hook_factors_in_fp16_and_bf16_halve_their_bytes_and_stay_close(rank, group):
    # factors="fp16" / "bf16": P and Q all-reduced in that type, widened back before the orthogonalization.
    # On the same data the gradients stay within the type's rounding of the fp32 run's, and the factor
    # bytes halve; a state saved without the option loads as fp32, one saved with another does not.
    data = batches(rank, 4)
    runs, stats = {}, {}
    for factors in ("fp32", "fp16", "bf16"):
        ddp, state = powersgd_hooked(group, rank=2, start_iter=1, factors=factors)
        runs[factors], _ = train(ddp, data, record_grads=True)
        stats[factors] = dict(state.last_stats)
        for step, g in enumerate(runs[factors]):
            expect(same_on_all_ranks(g, group), f"powersgd factors={factors} step {step}: ranks differ")
    for factors, bound in (("fp16", 5e-3), ("bf16", 5e-2)):
        for step in range(1, 4):
            a, b = runs[factors][step], runs["fp32"][step]
            rel = float((a - b).norm() / b.norm())
            expect(0 < rel < bound, f"powersgd factors={factors} step {step}: {rel:.2e} from fp32 (bound {bound})")
        expect(stats[factors]["factor_bytes"] * 2 == stats["fp32"]["factor_bytes"] > 0,
               f"factor bytes {factors} {stats[factors]} against fp32 {stats['fp32']}")
    # A gradient whose factors pass fp16's 65504 even divided by the world size: NonFiniteError on every
    # rank, and neither Q nor a residual written by the refused step.
    ddp, state = powersgd_hooked(group, rank=2, start_iter=1, factors="fp16")
    train(ddp, data[:2])
    before = state.state_dict()
    x, y = data[2]

    def overflowing_step():
        ddp.zero_grad()
        h = ddp.module.fc1.weight.register_hook(lambda g: g * 1e9)
        try:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        finally:
            h.remove()

    msg = raises_on_every_rank(overflowing_step, gradcomp.NonFiniteError, group)
    expect("overflowed fp16" in msg, msg)
    after = state.state_dict()
    for k in ("q", "residuals"):
        expect(all(torch.equal(before[k][n], after[k][n]) for n in before[k]), f"fp16 factors: {k} changed by the refused step")
    saved = state.state_dict()
    old = {**saved, "config": {k: v for k, v in saved["config"].items() if k != "factors"}}
    _, fp32_state = powersgd_hooked(group, rank=2, start_iter=1)
    fp32_state.load_state_dict(old)  # a state from before the option: fp32 factors
    rejected(lambda: state.load_state_dict(old), "factors: saved 'fp32', now 'fp16'", "an fp32 state into fp16")
    rejected(lambda: gt.PowerSGDState(None, factors="fp8"), "factors must be one of", "factors='fp8'")


@check(2)
def tiny_bucket_cap_rebuilds_buckets_and_stays_exact(rank, group):
    data = batches(rank, 4)
    ref, _ = train(ddp_of(make_net(), group), data, record_grads=True)
    ddp, state = hooked(group, "none", "ef", bucket_cap_mb=0.001, min_numel=0)
    got, _ = train(ddp, data, record_grads=True)
    expect(all(torch.equal(a, b) for a, b in zip(ref, got)), "identity codec with tiny buckets differs from DDP")
    expect(state.last_stats["buckets"] >= 3, f"only {state.last_stats['buckets']} buckets with bucket_cap_mb=0.001")
    ddp, state = hooked(group, "int8", "ef", bucket_cap_mb=0.001, min_numel=100)
    got, _ = train(ddp, data, record_grads=True)
    expect(all(same_on_all_ranks(g, group) and bool(torch.isfinite(g).all()) for g in got), "int8 tiny buckets")


@check(2)
def a_different_configuration_on_one_rank_is_the_same_error_on_every_rank(rank, group):
    for field, values in (("codec", ("int8", "fp16")), ("min_numel", (1024, 100)), ("error_feedback", ("ef", "none"))):
        kw = {"codec": "int8", "error_feedback": "ef", "min_numel": 1024}
        kw[field] = values[rank % 2]
        codec, ef = kw.pop("codec"), kw.pop("error_feedback")
        ddp, state = hooked(group, codec, ef, **kw)
        msg = raises_on_every_rank(lambda: train(ddp, batches(rank, 1)), gradcomp.CollectiveMismatch, group)
        expect(field in msg and "rank 1" in msg, f"the message does not name {field} and rank 1: {msg}")
        state.close()


@check(2)
def a_bf16_model_is_reduced_in_fp32_and_a_float64_one_refused(rank, group):
    # A model in bf16 hands the hook bf16 buckets: they are widened, encoded, summed and error-fed back in
    # fp32 and rounded back once (before 2026-12-05 a TypeError from the binding). Lossless, DDP's own bf16
    # result bit for bit (two addends: round(a + b) / 2 = round((a + b) / 2)); int8 + ef within 5 %, its
    # residuals fp32. A float64 model is refused at DDPState, naming a parameter.
    data = [(x.bfloat16(), y) for x, y in batches(rank, 3)]
    ref, _ = train(ddp_of(make_net().bfloat16(), group), data, record_grads=True)
    for codec, limit in (("none", 0.0), ("int8", 0.05)):
        ddp = ddp_of(make_net().bfloat16(), group)
        state = gt.DDPState(ddp, codec=codec, error_feedback="ef", process_group=group, min_numel=100)
        ddp.register_comm_hook(state, gt.ddp_hook)
        got, _ = train(ddp, data, record_grads=True)
        for step, (a, b) in enumerate(zip(ref, got)):
            rel = float((a.float() - b.float()).norm() / a.float().norm())
            expect(b.dtype == torch.bfloat16 and rel <= limit, f"bf16 {codec}: step {step} {rel:.2e} ({b.dtype})")
        residuals = state.state_dict()["residuals"]
        expect(codec == "none" or (residuals and all(r.dtype == torch.float32 for r in residuals.values())),
               f"bf16 {codec}: residuals {[(k, r.dtype) for k, r in residuals.items()]}")
        ls = state.last_stats  # the ratio is against DDP's own all-reduce of bf16 buckets: half fp32's bytes
        expect(2 * ls["ddp_allreduce_bytes"] == ls["fp32_allreduce_bytes"] and
               ls["compression_ratio"] == ls["ddp_allreduce_bytes"] / ls["bytes_sent"], f"bf16 {codec}: {ls}")
        state.close()
    rejected(lambda: gt.DDPState(ddp_of(make_net().double(), group), codec="int8", process_group=group),
             "fc1.weight (torch.float64)", "a float64 model")
    # The PowerSGD hook too (its matmuls needed one dtype: a RuntimeError before): exact before start_iter,
    # then P, Q and E in fp32, the gradient rounded back to bf16.
    ddp = ddp_of(make_net().bfloat16(), group)
    state = gt.PowerSGDState(ddp, rank=2, start_iter=1, process_group=group)
    ddp.register_comm_hook(state, gt.powersgd_hook)
    got, _ = train(ddp, data, record_grads=True)
    expect(torch.equal(got[0], ref[0]), "bf16 PowerSGD: the exact step is not DDP's own")
    expect(all(g.dtype == torch.bfloat16 and bool(torch.isfinite(g).all()) for g in got) and
           all(e.dtype == torch.float32 for e in state.state_dict()["residuals"].values()) and state.last_stats["compressed"] == 3,
           f"bf16 PowerSGD: {[g.dtype for g in got]}, {state.last_stats}")
    rejected(lambda: gt.PowerSGDState(ddp_of(make_net().double(), group), process_group=group),
             "fc1.weight (torch.float64)", "a float64 model under PowerSGD")


class WithUnused(torch.nn.Module):
    """Net behind a layer registered first and never used: with a small bucket cap its parameters fill
    DDP's last bucket, which skip_all_reduce_unused_params never hands to the hook."""

    def __init__(self):
        super().__init__()
        self.aux = torch.nn.Linear(40, 64)
        self.net = make_net()

    def forward(self, x):
        return self.net(x)


@check(2)
def a_backward_whose_last_bucket_ddp_skips_still_counts_as_a_step(rank, group):
    # The hooks count a step at its last bucket. DDP with skip_all_reduce_unused_params never hands over
    # a bucket of unused parameters: before 2026-12-06 the step count stayed at 0, so start_iter was never
    # reached (exact all-reduces forever, silently) and every step reused step 0's random streams. Now
    # both hooks count such a backward when the next begins: the same results, bit for bit, as DDP
    # reducing the unused bucket too, and the same iteration in the checkpoint.
    data = batches(rank, 4)

    def run(skip: bool, hooked_state):
        torch.manual_seed(0)
        model = WithUnused()
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.0001,
                                                        find_unused_parameters=True,
                                                        skip_all_reduce_unused_params=skip)
        state, hook = hooked_state(ddp)
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        grads = []
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in model.net.parameters()]))
            opt.step()
        return grads, state.state_dict()["iter"]

    # find_unused_parameters: DDP all-reduces its map of used parameters on its group from backward,
    # while the DDP hook's worker may still be exchanging; on one group that pairs collectives wrongly
    # (gloo aborted), so the hook refuses it and gets a group of its own.
    rejected(lambda: gt.DDPState(torch.nn.parallel.DistributedDataParallel(WithUnused(), process_group=group,
                                                                           find_unused_parameters=True),
                                 codec="int8", process_group=group), "a process group of its own",
             "the DDP hook on the group of a DDP with find_unused_parameters=True")
    # static_graph all-reduces that map in its first step before it hands over any bucket (the worker
    # idle), and never after: accepted on DDP's own group, and the ranks stay in line.
    static = torch.nn.parallel.DistributedDataParallel(make_net(), process_group=group, static_graph=True,
                                                       find_unused_parameters=True)
    state = gt.DDPState(static, codec="int8", error_feedback="ef", process_group=group, min_numel=100)
    static.register_comm_hook(state, gt.ddp_hook)
    got, _ = train(static, data[:3], record_grads=True)
    expect(all(same_on_all_ranks(g, group) and bool(torch.isfinite(g).all()) for g in got)
           and state.state_dict()["iter"] == 3, f"static_graph: iteration {state.state_dict()['iter']} after 3 steps, "
           f"or results that differ between ranks")
    state.close()
    hook_group = dist.new_group(list(range(dist.get_world_size(group))), timeout=CHECK_TIMEOUT)
    for name, hooked_state in (
            ("ddp_hook int8 stochastic", lambda ddp: (gt.DDPState(ddp, codec="int8:rounding=stochastic", error_feedback="ef",
                                                                  process_group=hook_group, start_iter=1, min_numel=100),
                                                      gt.ddp_hook)),
            ("powersgd_hook", lambda ddp: (gt.PowerSGDState(ddp, rank=2, start_iter=1, process_group=group),
                                           gt.powersgd_hook))):
        reduced, iters = run(False, hooked_state)
        skipped, skipped_iters = run(True, hooked_state)
        expect(iters == skipped_iters == len(data), f"{name}: iteration {skipped_iters} with the bucket skipped, "
               f"{iters} without, after {len(data)} steps")
        for step, (a, b) in enumerate(zip(reduced, skipped)):
            expect(torch.equal(a, b), f"{name}: step {step} differs with the unused bucket skipped "
                   f"(max |diff| {float((a - b).abs().max())})")


@check(2)
def a_ddp_that_delays_all_reduces_needs_a_hook_group_of_its_own(rank, group):
    # delay_all_reduce_named_params: DDP leaves the named parameters out of its buckets and all-reduces
    # their gradients itself, from another parameter's gradient hook, on its own group, during backward.
    # On that group the DDP hook's worker thread may be exchanging a bucket at the same moment (the
    # collectives would pair wrongly between ranks, as with find_unused_parameters' map), so the hook
    # refuses it; on a group of its own it reduces the buckets and DDP the delayed parameters: the same
    # gradients, bit for bit at two ranks, as DDP alone with the same delay.
    data = batches(rank, 3)

    def delayed_ddp():
        net = make_net()
        named = dict(net.named_parameters())
        # fc2's gradients are complete before fc1.weight's hook fires (backward reaches fc1 after fc2).
        return torch.nn.parallel.DistributedDataParallel(
            net, process_group=group, delay_all_reduce_named_params=[(n, named[n]) for n in ("fc2.weight", "fc2.bias")],
            param_to_hook_all_reduce=named["fc1.weight"])

    def grads_of(ddp):
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        grads = []
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            # DDP's delayed all-reduce is asynchronous and nothing waits for it; a gloo barrier completes
            # the group's earlier work first.
            dist.barrier(group=group)
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in ddp.parameters()]))
            opt.step()
        return grads

    rejected(lambda: gt.DDPState(delayed_ddp(), codec="none", process_group=group), "delay_all_reduce_named_params",
             "the DDP hook on the group of a DDP with delay_all_reduce_named_params")
    ref = grads_of(delayed_ddp())
    hook_group = dist.new_group(list(range(dist.get_world_size(group))), timeout=CHECK_TIMEOUT)
    ddp = delayed_ddp()
    state = gt.DDPState(ddp, codec="none", error_feedback="ef", process_group=hook_group, min_numel=0)
    ddp.register_comm_hook(state, gt.ddp_hook)
    got = grads_of(ddp)
    expect(state.state_dict()["iter"] == len(data), f"iteration {state.state_dict()['iter']} after {len(data)} steps")
    state.close()
    for step, (a, b) in enumerate(zip(ref, got)):
        expect(torch.equal(a, b), f"step {step}: max |diff| {float((a - b).abs().max())}")


class SameShapes(torch.nn.Module):
    """Four 32 x 32 hidden layers between an input layer and a head of other shapes."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(40, 32)
        self.hidden = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(4))
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)


@check(2)
def powersgd_hook_batches_same_shape_matrices_and_agrees_with_one_at_a_time(rank, group):
    # batch_tensors_with_same_shape: the four 32 x 32 weights go through each product and orthogonalization
    # as one batch (3 batches for 6 compressed matrices, against 6 without). The wire is the same and the
    # batched kernels round within fp32 of the single ones, so the runs agree to 1e-5 per step, and a
    # state saved with batching resumes without it. Ranks that disagree on the option fail on every rank.
    data = batches(rank, 4)
    runs, stats, states = {}, {}, {}
    for batched in (False, True):
        torch.manual_seed(0)
        ddp = ddp_of(SameShapes(), group)
        state = gt.PowerSGDState(ddp, process_group=group, rank=2, start_iter=1,
                                 batch_tensors_with_same_shape=batched)
        ddp.register_comm_hook(state, gt.powersgd_hook)
        runs[batched], _ = train(ddp, data, record_grads=True)
        stats[batched], states[batched] = dict(state.last_stats), state.state_dict()
        for step, g in enumerate(runs[batched]):
            expect(same_on_all_ranks(g, group), f"batched={batched} step {step}: ranks hold different gradients")
    expect(stats[False]["compressed"] == stats[True]["compressed"] == 6, f"{stats}")
    expect(stats[False]["batches"] == 6 and stats[True]["batches"] == 3, f"batches: {stats}")
    expect(stats[False]["factor_bytes"] == stats[True]["factor_bytes"] > 0, f"factor bytes: {stats}")
    expect(torch.equal(runs[False][0], runs[True][0]), "the exact step before start_iter differs")
    for step in range(1, 4):
        a, b = runs[True][step], runs[False][step]
        rel = float((a - b).norm() / b.norm())
        expect(rel < 1e-5, f"step {step}: batched is {rel:.2e} from one matrix at a time")
    torch.manual_seed(0)
    resumed = gt.PowerSGDState(ddp_of(SameShapes(), group), process_group=group, rank=2, start_iter=1)
    resumed.load_state_dict(states[True])
    expect(resumed.iter == 4 and all(torch.equal(resumed.q[k], states[True]["q"][k]) for k in states[True]["q"]),
           "a batched state does not resume one matrix at a time")
    torch.manual_seed(0)
    ddp = ddp_of(SameShapes(), group)
    state = gt.PowerSGDState(ddp, process_group=group, rank=2, batch_tensors_with_same_shape=rank == 0)
    ddp.register_comm_hook(state, gt.powersgd_hook)
    msg = raises_on_every_rank(lambda: train(ddp, data[:1]), gradcomp.CollectiveMismatch, group)
    expect("batch_tensors_with_same_shape" in msg, f"the message does not name the option: {msg}")
    rejected(lambda: gt.PowerSGDState(None, batch_tensors_with_same_shape="yes"),
             "batch_tensors_with_same_shape must be True or False", "a string for the option")


@check(2)
def ranks_resumed_at_different_iterations_fail_on_every_rank(rank, group):
    # Each rank loads its own checkpoint: one a step behind the other is a CollectiveMismatch naming the
    # iteration on every rank, before anything moves (dgc's warm-up and PowerSGD's start_iter size their
    # messages by the iteration: apart, gloo aborted the process on the size mismatch).
    data = batches(rank, 3)
    for name, make, spec in (("ddp_hook", hooked, ("topk:ratio=0.05", "dgc:warmup=4")),
                             ("powersgd_hook", powersgd_hooked, ())):
        kw = {"min_numel": 100} if make is hooked else {"rank": 2, "start_iter": 2}
        ddp, state = make(group, *spec, **kw)
        saved = []
        for step in range(2):
            train(ddp, data[step:step + 1])
            saved.append(torch.load(_saved(state.state_dict()), weights_only=False))
        # into the state that ran (the ranks agreed on its configuration already), as a rollback would
        state.load_state_dict(saved[rank % 2])  # rank 0 resumes at iteration 1, rank 1 at 2
        msg = raises_on_every_rank(lambda: train(ddp, data[2:]), gradcomp.CollectiveMismatch, group)
        expect("iter: rank 0 has 1, rank 1 has 2" in msg, f"{name}: the message does not name the iterations: {msg}")
        if hasattr(state, "close"):
            state.close()


@check(2)
def fsdp2_ranks_that_disagree_fail_on_every_rank_and_start_iter_is_exact(rank, group):
    # The FSDP reduce-scatter is called as FSDP calls it, on this check's group (errors stay off FSDP's
    # backward; see the overflow cases above). Its all_to_all's size follows from the codec, the options,
    # the step and the input: before this check a codec of another size on one rank made gloo abort rank
    # 0's process. Now each is a CollectiveMismatch on every rank naming the field.
    W = dist.get_world_size(group)
    n, chunk = 4096 * W, 4096
    module = torch.nn.Linear(1, 1)  # one anonymous piece per chunk
    g = torch.randn(n, generator=torch.Generator().manual_seed(rank))
    out = torch.empty(chunk)

    def rs_of(**kw):
        return gt.CompressedReduceScatter(module, **{"codec": "int8", "error_feedback": "ef", "fqn": "m", **kw})

    for field, values in (("codec", ("int8", "fp16")), ("min_numel", (0, 100000)), ("start_iter", (0, 1)),
                          ("error_feedback", ("ef", "none")), ("seed", (0, 1))):
        rs = rs_of(**{field: values[rank % 2]})
        msg = raises_on_every_rank(lambda: rs(out, g.clone(), group), gradcomp.CollectiveMismatch, group)
        expect(f"{field}: rank 0 has" in msg and "rank 1 has" in msg, f"FSDP {field}: {msg}")
    m = n * (1 + rank % 2)  # FSDP modules of other sizes on the two ranks
    rs = rs_of()
    msg = raises_on_every_rank(lambda: rs(torch.empty(m // W), torch.randn(m), group), gradcomp.CollectiveMismatch,
                               group)
    expect(f"input_numel: rank 0 has {n}, rank 1 has {2 * n}" in msg, f"FSDP input size: {msg}")
    m = n + rank % 2  # rank 1's cannot be split: the same mismatch at once, not a wait on rank 0 until the deadline
    rs = rs_of()
    msg = raises_on_every_rank(lambda: rs(torch.empty(n // W), torch.randn(m), group), gradcomp.CollectiveMismatch,
                               group)
    expect(f"input_numel: rank 0 has {n}, rank 1 has {n + 1}" in msg, f"FSDP unsplittable input: {msg}")

    # Each rank resumes from its own state: one a step behind is a CollectiveMismatch naming the steps
    # (dgc's warm-up gives the two steps messages of different sizes); the same step goes on.
    spec = "dgc:momentum=0.9,warmup=4"
    rs = rs_of(codec="topk:ratio=0.01", error_feedback=spec)
    saved = []
    for _ in range(2):
        rs(out, g.clone(), group)
        saved.append(torch.load(_saved(rs.state_dict()), weights_only=False))
    for again in (rs_of(codec="topk:ratio=0.01", error_feedback=spec), rs):  # a new instance; the one that ran
        again.load_state_dict(saved[rank % 2])
        msg = raises_on_every_rank(lambda: again(out, g.clone(), group), gradcomp.CollectiveMismatch, group)
        expect("step: rank 0 has 1, rank 1 has 2" in msg, f"FSDP resumed apart: {msg}")
        again.load_state_dict(saved[1])
        again(out, g.clone(), group)
        expect(again.step == 3 and bool(torch.isfinite(out).all()), f"FSDP resumed together: step {again.step}")
    # The saved state names its configuration: another codec or seed is refused at load, naming it.
    rejected(lambda: rs_of(codec="randomk:ratio=0.01", error_feedback=spec).load_state_dict(saved[0]),
             "codec: saved 'topk", "an FSDP state of top-k loaded into random-k")
    rejected(lambda: rs_of(codec="topk:ratio=0.01", error_feedback=spec, seed=5).load_state_dict(saved[0]),
             "seed: saved 0, now 5", "an FSDP state of seed 0 loaded with seed 5")

    # start_iter=2: the first two steps are the exact mean (at 2 ranks a + b in any order, bitwise), fp32
    # bytes, no state moved, dgc's momentum left out with one warning; the third is a fresh reduce-scatter's
    # first step, bit for bit (dgc's warm-up counts from start_iter).
    total = g.clone()
    dist.all_reduce(total, group=group)
    want = (total / W)[rank * chunk:(rank + 1) * chunk]
    late, fresh = rs_of(codec="topk:ratio=0.01", error_feedback=spec, start_iter=2), rs_of(codec="topk:ratio=0.01",
                                                                                          error_feedback=spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            late(out, g.clone(), group)
            if W == 2:
                expect(torch.equal(out, want), f"FSDP start_iter: step {step} is not the exact mean")
            expect(late.last_stats["bytes_sent"] == (W - 1) * chunk * 4, f"FSDP start_iter: {late.last_stats}")
    told = [str(w.message) for w in caught if "start_iter=2" in str(w.message)]
    expect(len(told) == 1 and "momentum" in told[0], f"FSDP start_iter with dgc: warnings {told}")
    expect(not late.state_dict()["residuals"] and not late.state_dict()["momentum"],
           "FSDP start_iter: an exact step kept a state")
    first = torch.empty(chunk)
    late(out, g.clone(), group)
    fresh(first, g.clone(), group)
    expect(torch.equal(out, first) and late.last_stats["bytes_sent"] == fresh.last_stats["bytes_sent"],
           f"FSDP start_iter: the first compressed step is not a fresh one's ({late.last_stats['bytes_sent']} "
           f"against {fresh.last_stats['bytes_sent']} bytes)")
    rejected(lambda: rs_of(start_iter=-1), "start_iter must be an integer >= 0", "FSDP start_iter=-1")
    # float64 gradients on every rank: past the agreement, refused by name on every rank
    rejected(lambda: rs_of()(torch.empty(chunk, dtype=torch.float64), g.double(), group), "the gradient (torch.float64)",
             "an FSDP float64 gradient")


@check(1)
def one_rank_reduces_exactly_and_keeps_no_state(rank, group):
    # Nothing travels in a world of one rank: FSDP itself skips the reduce-scatter there (this torch does;
    # the results must be FSDP's own either way), and called, the reduce-scatter returns its input, as
    # the hook all-reduces exactly there, with no state kept; a policy whose momentum is sent warns once.
    data = batches(rank, 2)
    ref = fsdp_grads(fsdp_net(group), data)
    net = fsdp_net(group)
    comms = gt.compress_fsdp(net, codec="sign", error_feedback="ef", min_numel=0)
    got = fsdp_grads(net, data)
    expect(all(torch.equal(a, b) for a, b in zip(ref, got)), "FSDP at one rank is not FSDP's own result")
    expect(all(rs.step == 0 for rs in comms.values()), "FSDP called the reduce-scatter at one rank: the direct "
           "call below is then not the only test of one rank's exact path; check its results here too")
    rs = gt.CompressedReduceScatter(torch.nn.Linear(1, 1), codec="topk:ratio=0.01", error_feedback="dgc", fqn="m")
    g, out = torch.randn(1000), torch.empty(1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rs(out, g, group)
        rs(out, g, group)
    told = [str(w.message) for w in caught if "a world of one rank" in str(w.message)]
    expect(torch.equal(out, g) and len(told) == 1, f"FSDP dgc at one rank: warnings {told}")
    expect(not rs.state_dict()["momentum"] and rs.last_stats["bytes_sent"] == 0 and rs.step == 2,
           f"FSDP dgc at one rank: state kept or bytes counted ({rs.last_stats})")


@check(2)
def a_nan_gradient_names_the_parameter_on_every_rank_and_leaves_residuals_alone(rank, group):
    data = batches(rank, 2)
    x, y = data[1]
    # dgc's momentum u and accumulation v too, with a NaN and (clipping by the norm) with an Inf
    for codec, ef, poison in (("int8", "ef", float("nan")), ("topk:ratio=0.05", "dgc:clip=0.5,warmup=2", float("nan")),
                              ("topk:ratio=0.05", "dgc:clip=0.5,warmup=2", float("inf"))):
        ddp, state = hooked(group, codec, ef, min_numel=100)
        train(ddp, data[:1])
        before = {k: state.state_dict()[k] for k in ("residuals", "momentum")}

        def poisoned_step():
            with torch.no_grad():
                if rank == 1:
                    ddp.module.fc2.weight.grad = None
                ddp.zero_grad()
            h = ddp.module.fc2.weight.register_hook(lambda g: g * poison if rank == 1 else g)
            try:
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
            finally:
                h.remove()

        msg = raises_on_every_rank(poisoned_step, gradcomp.NonFiniteError, group)
        expect("fc2.weight" in msg and "rank 1" in msg, f"{ef}: message does not name fc2.weight / rank 1: {msg}")
        for store, was in before.items():
            now = state.state_dict()[store]
            expect(sorted(now) == sorted(was) and all(torch.equal(was[k], now[k]) for k in was),
                   f"{ef}: {store} changed by the failed step")
        state.close()
    # Five buckets from the second step on (DDP rebuilds them): fc2.weight's fails on every rank, every
    # rank skips the backward's later buckets alike (their residuals too: a bucket reduced before the
    # failed one has committed its own), and the next step is in line everywhere.
    ddp, state = hooked(group, "int8", "ef", min_numel=100, bucket_cap_mb=0.0001)
    train(ddp, data[:1])
    msg = raises_on_every_rank(poisoned_step, gradcomp.NonFiniteError, group)
    expect("fc2.weight" in msg, f"five buckets: the error does not name fc2.weight: {msg}")
    after, _ = train(ddp, data[:1], record_grads=True)
    expect(bool(torch.isfinite(after[0]).all()) and same_on_all_ranks(after[0], group),
           "five buckets: the step after the failed one is not the same finite result on every rank")
    state.close()
    # With nonfinite="skip" the poisoned rank sends zeros and training goes on.
    ddp, state = hooked(group, "int8", "ef", min_numel=100, nonfinite="skip")
    train(ddp, data[:1])
    h = ddp.module.fc2.weight.register_hook(lambda g: g * float("nan") if rank == 1 else g)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    h.remove()
    expect(all(bool(torch.isfinite(p.grad).all()) for p in ddp.parameters()), "skip left a non-finite gradient")
    skipped = torch.tensor([state.last_stats["skipped"]])
    dist.all_reduce(skipped, group=group)
    expect(int(skipped) >= 1, "no bucket counted as skipped")


@check(2, 4)
def an_overflowing_error_feedback_state_is_reset_with_a_warning(rank, group):
    # An error-feedback state grown to FLT_MAX with a large finite gradient: value + residual (ef, the
    # senders' through reduce-scatter and allgather, an owner's re-encode, under nonfinite="skip" too) or
    # m u + g (dgc's momentum) is not finite while the gradient is. The step goes on with that state reset
    # to zero, warning with the parameter's name, as the C++ policies reset theirs; before, it was a
    # NonFiniteError that blamed the finite gradient, at every step after (and under skip, a part dropped
    # at every step). ef21's h cannot be reset on one rank (every rank's H holds it): a clear error.
    data = batches(rank, 2)
    big = torch.finfo(torch.float32).max
    cases = (("int8", "ef", "residuals", {}), ("int8", "ef", "server_residuals", {}),
             ("int8", "ef", "residuals", {"nonfinite": "skip"}), ("topk:ratio=0.05", "ef", "residuals", {}),
             ("topk:ratio=0.05", "dgc:momentum=0.999999", "momentum", {}),
             ("topk:ratio=0.05", "dgc:momentum=0.999999", "residuals", {}))
    for codec, ef, store, kw in cases:
        what = f"{codec} {ef} {store} {kw}"
        ddp, state = hooked(group, codec, ef, min_numel=100, **kw)
        train(ddp, data[:1], lr=0.0)
        sd = state.state_dict()
        sd[store]["fc1.weight"] = torch.full_like(sd[store]["fc1.weight"], big)
        state.load_state_dict(sd)
        h = ddp.module.fc1.weight.register_hook(lambda g: g.abs() * 1e34 + 1e34)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got, _ = train(ddp, data[1:], lr=0.0, record_grads=True)
            state.wait()
        h.remove()
        told = [str(w.message) for w in caught if "overflowed" in str(w.message)]
        # (every rank owns a segment of fc1.weight in reduce-scatter, so every owner resets its own)
        expect(bool(told) and all("fc1.weight" in t for t in told) and state.last_stats["resets"] >= 1,
               f"{what}: warnings {told}, resets {state.last_stats['resets']}")
        expect(bool(torch.isfinite(got[0]).all()) and same_on_all_ranks(got[0], group),
               f"{what}: the step after the reset is not finite or differs between ranks")
        expect(state.last_stats["skipped"] == 0, f"{what}: skipped {state.last_stats['skipped']}")
        after = state.state_dict()[store]["fc1.weight"].reshape(-1)
        if store == "server_residuals":  # an owner keeps (and resets) its own segment's only
            seg = -(-after.numel() // dist.get_world_size(group))
            after = after[rank * seg:(rank + 1) * seg]
        expect(bool(torch.isfinite(after).all()) and float(after.abs().max()) < big, f"{what}: not reset")
        if ef.startswith("dgc"):  # the momentum masked where sent (5 %), not zeroed whole after a reset
            zero = float((state.state_dict()["momentum"]["fc1.weight"] == 0).float().mean())
            expect(zero < 0.5, f"{what}: {zero:.2f} of the momentum is zero")
        state.close()
    ddp, state = hooked(group, "int8", "ef21", min_numel=100)
    train(ddp, data[:1], lr=0.0)
    sd = state.state_dict()
    sd["residuals"]["fc1.weight"] = torch.full_like(sd["residuals"]["fc1.weight"], big)
    state.load_state_dict(sd)
    before = {k: state.state_dict()[k] for k in ("residuals", "shared")}
    x, y = data[1]

    def overflowing_step():
        ddp.zero_grad()
        h = ddp.module.fc1.weight.register_hook(lambda g: g.abs() * 1e34 + 1e34)
        try:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        finally:
            h.remove()

    msg = raises_on_every_rank(overflowing_step, gradcomp.NonFiniteError, group)
    expect("error-feedback state of parameter 'fc1.weight' overflowed" in msg and "ef21" in msg, msg)
    for k, was in before.items():
        now = state.state_dict()[k]
        expect(all(torch.equal(was[n], now[n]) for n in was), f"ef21: {k} changed by the refused step")
    state.close()


@check(2)
def the_hook_state_pickles_with_torch_save(rank, group):
    data = batches(rank, 4)
    # ef21 also carries its shared estimate H, ef21-sgdm and dgc their momenta
    for codec, ef in (("int8", "ef"), ("int8", "ef21"), ("int8", "ef21-sgdm"), ("topk:ratio=0.05", "dgc:warmup=3")):
        ddp, state = hooked(group, codec, ef, min_numel=100)
        train(ddp, data[:2])
        blob = io.BytesIO()
        torch.save(state, blob)
        blob.seek(0)
        restored = torch.load(blob, weights_only=False)
        expect(restored.iter == state.iter == 2, f"iter {restored.iter}")
        for store in ("residuals", "shared", "momentum"):
            a, b = state.state_dict()[store], restored.state_dict()[store]
            expect(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
                   f"{ef}: {store} differ after pickling")
        fresh = ddp_of(make_net(), group)
        fresh.module.load_state_dict(ddp.module.state_dict())
        restored.attach(fresh, process_group=group)
        fresh.register_comm_hook(restored, gt.ddp_hook)
        train(fresh, data[2:])
        train(ddp, data[2:])
        expect(torch.equal(flat_params(fresh), flat_params(ddp)), f"{ef}: the unpickled state trains differently")
        state.close()
        restored.close()


def mesh_of(group):
    """A 1-D mesh over the check's own group (FSDP's default mesh would be the default group, which a
    failed check could leave with an unanswered collective for the next one). Named after the group:
    DeviceMesh equality ignores the group, and DTensor's sharding caches hand back the first equal mesh
    they saw, so unnamed meshes over the same ranks ran full_tensor() on an earlier check's group."""
    from torch.distributed.device_mesh import DeviceMesh
    return DeviceMesh.from_group(group, "cpu", mesh_dim_names=(f"check_{group.group_name}",))


def fsdp_net(group):
    """make_net with FSDP2 on each layer and the root, over the check's group."""
    from torch.distributed.fsdp import fully_shard
    net, mesh = make_net(), mesh_of(group)
    for m in (net.fc1, net.fc2, net.head):
        fully_shard(m, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


def fsdp_grads(net, data, lr: float = 0.1) -> list[torch.Tensor]:
    """Each step's whole gradient (the shards gathered), every parameter flattened in order."""
    out = []
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        out.append(torch.cat([p.grad.full_tensor().reshape(-1) for p in net.parameters()]))
        opt.step()
    return out


@check(2)
def fsdp2_custom_reduce_scatter_matches_fsdp_and_bounds_int8(rank, group):
    data = batches(rank, 3)

    def grads_of(net):
        return fsdp_grads(net, data)

    ref = grads_of(fsdp_net(group))
    net = fsdp_net(group)
    comms = gt.compress_fsdp(net, codec="none", error_feedback="none")
    got = grads_of(net)
    expect(len(comms) == 4, f"{len(comms)} FSDP modules got the reduce-scatter")
    for step, (a, b) in enumerate(zip(ref, got)):
        expect(torch.equal(a, b), f"none: step {step} max |diff| {float((a - b).abs().max())}")
    net = fsdp_net(group)
    comms = gt.compress_fsdp(net, codec="int8", error_feedback="ef")
    got = grads_of(net)
    for step, (a, b) in enumerate(zip(ref, got)):
        # int8 with a scale per 256 values: each value within half a step of its block's max / 127,
        # summed over ranks then averaged: |err| <= max|block| / 254 <= max|g| / 254 per element.
        limit = float(max(a.abs().max(), b.abs().max())) / 254 * 2 + 1e-6
        expect(float((a - b).abs().max()) <= limit, f"int8: step {step} max |diff| {float((a - b).abs().max())} > {limit}")
    keys = sorted(k for rs in comms.values() for k in rs.state_dict()["residuals"])
    expect(keys == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "head.bias", "head.weight"],
           f"FSDP residuals are not keyed by parameter name: {keys}")
    # qsgd at 4 bits: plain ef warns (naming ef:scale=auto), ef:scale=auto does not, and sends less of
    # each value (1 / (1 + omega)) on the first step.
    first = {}
    for ef in ("ef", "ef:scale=auto"):
        net = fsdp_net(group)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gt.compress_fsdp(net, codec="qsgd", error_feedback=ef, min_numel=100)
            got = grads_of(net)
        told = [str(w.message) for w in caught if "not contractive" in str(w.message)]
        expect(bool(told) == (ef == "ef") and all("ef:scale=auto" in t for t in told), f"FSDP qsgd {ef}: warnings {told}")
        expect(all(bool(torch.isfinite(g).all()) for g in got), f"FSDP qsgd {ef}: non-finite gradient")
        first[ef] = float(got[0].norm() / ref[0].norm())
    expect(first["ef:scale=auto"] < 0.75 * first["ef"], f"FSDP ef:scale=auto's first step {first['ef:scale=auto']:.2f} "
           f"of the exact norm, plain ef {first['ef']:.2f}")


@check(2)
def fsdp2_under_mixed_precision_reduces_in_fp32_and_returns_the_reduce_dtype(rank, group):
    # bf16 parameters, gradients reduced in bf16 or fp32 (MixedPrecisionPolicy): the reduce-scatter
    # decodes and sums in fp32 and hands FSDP its reduce dtype. Lossless, it is FSDP's own result bit for
    # bit (two addends: a + b in any order, rounded once to bf16 either way); int8 + ef within 5 %.
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    data = batches(rank, 3)
    for reduce_dtype in (torch.bfloat16, torch.float32):
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)

        def net_of():
            net = make_net()
            for m in (net.fc1, net.fc2, net.head):
                fully_shard(m, mesh=mesh_of(group), mp_policy=policy)
            fully_shard(net, mesh=mesh_of(group), mp_policy=policy)
            return net

        ref = fsdp_grads(net_of(), data)
        for codec, ef, limit in (("none", "none", 0.0), ("int8", "ef", 0.05)):
            net = net_of()
            comms = gt.compress_fsdp(net, codec=codec, error_feedback=ef)
            got = fsdp_grads(net, data)
            for step, (a, b) in enumerate(zip(ref, got)):
                rel = float((a.float() - b.float()).norm() / a.float().norm())
                expect(rel <= limit and bool(torch.isfinite(b).all()),
                       f"FSDP {codec} reducing in {reduce_dtype}: step {step} {rel:.2e} from FSDP's own")
            expect(all(comms[m].last_stats.get("bytes_sent", 0) > 0 for m in ("fc1", "fc2", "head")),
                   f"FSDP {codec}: gradcomp's reduce-scatter was not called")


@check(4)
def fsdp2_hsdp_returns_the_mean_over_every_rank(rank, group):
    # HSDP, a (replicate 2, shard 2) mesh: gradcomp's reduce-scatter returns each shard group's mean, and
    # FSDP all-reduces the two replicas and divides by 2 (the divide factor compress_fsdp sets): lossless,
    # FSDP's own HSDP result to fp32 rounding (before 2026-12-05 twice it: the factor was 1 and FSDP's
    # all-reduce summed the replicas); int8 + ef within 5 %. A mesh that shards over one rank is refused
    # (FSDP calls no reduce-scatter there: nothing would be compressed).
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def net_of(shape):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=("replicate", "shard"))
        net = make_net()
        for m in (net.fc1, net.fc2, net.head):
            fully_shard(m, mesh=mesh)
        fully_shard(net, mesh=mesh)
        return net

    data = batches(rank, 3)
    ref = fsdp_grads(net_of((2, 2)), data)
    for codec, ef, limit in (("none", "none", 1e-6), ("int8", "ef", 0.05)):
        net = net_of((2, 2))
        comms = gt.compress_fsdp(net, codec=codec, error_feedback=ef)
        got = fsdp_grads(net, data)
        for step, (a, b) in enumerate(zip(ref, got)):
            rel = float((a - b).norm() / a.norm())
            expect(rel <= limit, f"HSDP {codec}: step {step} {rel:.2e} from FSDP's own (norm ratio "
                   f"{float(b.norm() / a.norm()):.3f})")
        expect(all(comms[m].last_stats.get("bytes_sent", 0) > 0 for m in ("fc1", "fc2", "head")),
               f"HSDP {codec}: gradcomp's reduce-scatter was not called")
    rejected(lambda: gt.compress_fsdp(net_of((4, 1)), codec="int8"), "is replicated over 4 ranks and sharded over 1",
             "a mesh that shards over one rank")

    # The replicas are each module's own (FSDP's mesh info), and a tensor-parallel dimension is not one:
    # read from the parameters' placements instead, a root on a 1-D mesh took its children's HSDP factor
    # (0.5x its own gradients), and a LayerNorm replicated over TP counted TP as replicas (0.5x).
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    class Small(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.norm, self.fc, self.head = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.head(torch.relu(self.fc(self.norm(x))))

    def grads_of(net, x, y):
        net.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        return {n: p.grad.full_tensor().clone() for n, p in net.named_parameters()}

    flat = init_device_mesh("cpu", (4,))
    hsdp = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    tp = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

    def mixed():  # the root's own parameters (head) on a 1-D mesh, norm and fc under HSDP
        net = Small()
        fully_shard(net.norm, mesh=hsdp)
        fully_shard(net.fc, mesh=hsdp)
        fully_shard(net, mesh=flat)
        return net

    def with_tp():  # norm replicated over tp (a DTensor), FSDP over dp: the tp ranks see the same data
        net = Small()
        distribute_module(net.norm, tp["tp"],
                          input_fn=lambda mod, inputs, mesh: tuple(DTensor.from_local(t, mesh, [Replicate()])
                                                                   for t in inputs),
                          output_fn=lambda mod, out, mesh: out.to_local())
        fully_shard(net.norm, mesh=tp["dp"])
        fully_shard(net, mesh=tp["dp"])
        return net

    for what, make, seed in (("a root on a 1-D mesh over HSDP children", mixed, rank),
                             ("FSDP with a tensor-parallel norm", with_tp, rank // 2)):
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
        want = grads_of(make(), x, y)
        net = make()
        gt.compress_fsdp(net, codec="none", error_feedback="none")
        got = grads_of(net, x, y)
        for name, w in want.items():
            ratio = float(got[name].norm() / w.norm())
            expect(float((got[name] - w).norm() / w.norm()) <= 1e-6,
                   f"{what}: {name} is {ratio:.3f}x FSDP's own")


@check(2, 4)
def fsdp2_runs_ef21_ef21_sgdm_and_dgc_as_the_hook_does(rank, group):
    # The DDP hook's other policies in the FSDP reduce-scatter, with lr 0 (the parameters never move, so
    # each rank's gradients are known without FSDP, and the exact run's means are this run's too):
    #  - ef21 through the lossless codec returns the exact mean at every step (a missing H, or an h that
    #    never moves, is far off from step 1 on); through int8 within 3 % of it, as the hook;
    #  - ef21-sgdm:eta=0.5 through the lossless codec returns the momentum of the exact means;
    #  - dgc is the C++ DgcFeedback's step on each chunk of each parameter (the policy keyed by the chunk's
    #    tensor id, on the gradient clipped as a whole), momentum and v included, warm-up and all;
    #  - each state resumes bitwise on a new instance, and loads only into the policy that saved it.
    # Parameters below min_numel=100 (the biases) are exact throughout.
    W = dist.get_world_size(group)
    data = batches(rank, 6)
    exact = fsdp_grads(fsdp_net(group), data, lr=0.0)
    named = list(make_net().named_parameters())
    sizes = [p.numel() for _, p in named]
    compressed = [p.numel() >= 100 for _, p in named]

    def run(codec, ef, steps=data, nets=None, **kw):
        net = fsdp_net(group) if nets is None else nets
        comms = gt.compress_fsdp(net, codec=codec, error_feedback=ef, min_numel=100, **kw) if nets is None else None
        return fsdp_grads(net, steps, lr=0.0), comms, net

    for codec, limit in (("none", 1e-6), ("int8", 3e-2)):
        got, comms, _ = run(codec, "ef21")
        for step, (g, e) in enumerate(zip(got, exact)):
            rel = float((g - e).norm() / e.norm())
            expect(rel <= limit, f"FSDP {codec} ef21 step {step}: {rel:.2e} from the exact mean > {limit}")
        shared = {k: v for rs in comms.values() for k, v in rs.state_dict()["shared"].items()}
        expect(sorted(shared) == sorted(n for n, _ in named), f"FSDP ef21: H is not saved by parameter: {sorted(shared)}")
    got, comms, _ = run("none", "ef21-sgdm:eta=0.5")
    m = torch.zeros_like(exact[0])
    for step, (g, e) in enumerate(zip(got, exact)):
        m = 0.5 * m + 0.5 * e
        want = torch.cat([a if c else b for c, a, b in zip(compressed, m.split(sizes), e.split(sizes))])
        rel = float((g - want).norm() / want.norm())
        expect(rel <= 1e-6, f"FSDP ef21-sgdm step {step}: {rel:.2e} from the momentum of the exact means")

    # dgc against the C++ policy, chunk by chunk: FSDP cuts a parameter of R rows into W chunks of
    # ceil(R / W) rows (the last ones short or empty); chunk r's tensor id is the hook's for the element it
    # starts at. Clipping is the parameter's as a whole, so the policy (clip=0) gets the clipped gradient.
    spec, clip = "dgc:momentum=0.9,clip=0.05,warmup=4", 0.05
    local = local_gradients(rank, data)
    for codec_spec in ("topk:ratio=0.05", "randomk:ratio=0.05"):
        got, comms, _ = run(codec_spec, spec)
        codec = gradcomp.Codec(codec_spec)
        policy = gradcomp.ErrorFeedback("dgc:momentum=0.9,clip=0,warmup=4")
        chunks = []  # (parameter index, first element, end, tensor id)
        for i, (name, p) in enumerate(named):
            if p.numel() >= 100:
                rows_per = -(-p.shape[0] // W) * (p.numel() // p.shape[0])
                for r in range(W):
                    first, end = r * rows_per, min((r + 1) * rows_per, p.numel())
                    if first < end:
                        chunks.append((i, first, end, zlib.crc32(f"{name}@{first}".encode()) & 0x7FFFFFFF))
        for step, grads in enumerate(local):
            want = exact[step].clone().split(sizes)
            for i, first, end, tid in chunks:
                g = grads[i]
                norm = float(torch.linalg.vector_norm(g, dtype=torch.float64))
                g = g * torch.tensor(clip / norm if norm > clip else 1.0, dtype=torch.float32)
                piece = g[first:end].contiguous()
                out = torch.zeros(policy.max_encoded_bytes(codec._c, piece.numel(), step=step), dtype=torch.uint8)
                n = policy.compress_into(codec._c, piece.numpy(), out.numpy(), rank=rank, step=step,
                                         tensor_id=tid).encoded.wire_bytes
                mean = torch.from_numpy(codec.decode(out[:n].numpy()))
                dist.all_reduce(mean, group=group)
                want[i][first:end] = mean / W
            want = torch.cat(want)
            rel = float((got[step] - want).norm() / want.norm())
            expect(rel <= 1e-5, f"FSDP {codec_spec} dgc step {step}: {rel:.2e} from the C++ policy's mean")
        state = {k: v for rs in comms.values() for k, v in rs.state_dict()["momentum"].items()}
        resid = {k: v for rs in comms.values() for k, v in rs.state_dict()["residuals"].items()}
        for i, first, end, tid in chunks:
            name = named[i][0]
            u, v = torch.from_numpy(policy.state(tid, 0)), torch.from_numpy(policy.state(tid, 1))
            mine = state[name].reshape(-1)[first:end]
            expect(torch.allclose(mine, u, rtol=1e-5, atol=1e-8) and torch.equal(mine == 0, u == 0),
                   f"FSDP {codec_spec} dgc: the momentum of {name}[{first}:{end}] is not the policy's")
            expect(torch.allclose(resid[name].reshape(-1)[first:end], v, rtol=1e-5, atol=1e-8),
                   f"FSDP {codec_spec} dgc: v of {name}[{first}:{end}] is not the policy's")

    # Resume: two steps, the states saved, a new model and reduce-scatter loaded with them, two more
    # steps: the same gradients, bit for bit, as four steps in one go, and then the same states to save
    # (a chunk's loaded state once stayed pending beside the placed one: saved again, loaded + current).
    for codec, ef in (("topk:ratio=0.05", spec), ("int8", "ef21"), ("int8", "ef21-sgdm:eta=0.5")):
        whole, whole_comms, _ = run(codec, ef, data[:4])
        first_half, comms, _ = run(codec, ef, data[:2])
        saved = {fqn: torch.load(_saved(rs.state_dict()), weights_only=False) for fqn, rs in comms.items()}
        net = fsdp_net(group)
        again = gt.compress_fsdp(net, codec=codec, error_feedback=ef, min_numel=100)
        for fqn, rs in again.items():
            rs.load_state_dict(saved[fqn])
        second_half = fsdp_grads(net, data[2:4], lr=0.0)
        for step, (a, b) in enumerate(zip(whole, first_half + second_half)):
            expect(torch.equal(a, b), f"FSDP {codec} {ef}: resumed step {step} differs by {float((a - b).abs().max()):.2e}")
        for fqn, rs in again.items():
            mine, want = rs.state_dict(), whole_comms[fqn].state_dict()
            for key in ("residuals", "momentum", "shared"):
                expect(sorted(mine[key]) == sorted(want[key]) and
                       all(torch.equal(mine[key][n], want[key][n]) for n in want[key]),
                       f"FSDP {codec} {ef}: the {key} of {fqn or 'the root'} saved after the resume differ")
        legacy = {k: v for k, v in saved[""].items() if k != "error_feedback"}  # as saved before this check came
        rejected(lambda: gt.compress_fsdp(fsdp_net(group), codec=codec, error_feedback=ef)[""].load_state_dict(legacy),
                 "a state saved before ef21, ef21-sgdm and dgc came to FSDP", f"an old FSDP state loaded into {ef}")
        rejected(lambda: gt.compress_fsdp(fsdp_net(group), codec=codec, error_feedback="ef")[""].load_state_dict(saved[""]),
                 f"saved with error_feedback {saved[''].get('error_feedback')!r}, this reduce-scatter runs 'ef'",
                 f"an FSDP state of {ef} loaded into ef")
    rejected(lambda: gt.compress_fsdp(fsdp_net(group), codec="topk:ratio=0.05", error_feedback=spec, nonfinite="skip"),
             "nonfinite='skip' is not supported", "FSDP dgc with nonfinite='skip'")
    rejected(lambda: gt.compress_fsdp(fsdp_net(group), codec="int8:rotate=hadamard", error_feedback=spec), "rotated codec",
             "FSDP dgc with a rotated codec")
    rejected(lambda: gt.compress_fsdp(fsdp_net(group), codec="int8", error_feedback="dgc:clip=-1"), "clip must be",
             "FSDP dgc:clip=-1")

    # A state grown to FLT_MAX, then a large finite gradient: dgc's momentum restarts from the gradient
    # with a warning naming the parameter; ef21's h is refused on every rank with its state unchanged (the
    # hook's rules, reliability row 19). The reduce-scatter is called as FSDP calls it, on this check's
    # group: an error raised through FSDP's own backward would leave FSDP's collectives on the default group
    # to its state, which the checks that follow share.
    big = torch.finfo(torch.float32).max
    n = 4096 * W
    module = torch.nn.Linear(1, 1)  # not an FSDP module: its input is one anonymous piece per chunk
    g = torch.randn(n, generator=torch.Generator().manual_seed(rank))
    for ef, store in (("dgc:momentum=0.999999", "momentum"), ("ef21", "residuals")):
        rs = gt.CompressedReduceScatter(module, codec="topk:ratio=0.05" if ef.startswith("dgc") else "int8",
                                        error_feedback=ef, fqn="m")
        out = torch.empty(n // W)
        rs(out, g.clone(), group)
        sd = rs.state_dict()
        name = f"m#flat{n}"
        sd[store][name] = torch.full_like(sd[store][name], big)
        rs.load_state_dict(sd)
        before = rs.state_dict()
        large = g.abs() * 1e34 + 1e34  # finite; over FLT_MAX once added to the state
        if store == "momentum":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rs(out, large, group)
            told = [str(w.message) for w in caught if "overflowed" in str(w.message)]
            expect(bool(told) and all(name in t for t in told) and rs.last_stats["resets"] >= 1,
                   f"FSDP {ef}: warnings {told}, resets {rs.last_stats['resets']}")
            after = rs.state_dict()["momentum"][name]
            expect(bool(torch.isfinite(after).all()) and float(after.abs().max()) < big,
                   f"FSDP {ef}: not reset (largest {float(after.abs().max()):.3g})")
            expect(bool(torch.isfinite(out).all()), f"FSDP {ef}: the step after the reset is not finite")
        else:
            msg = raises_on_every_rank(lambda: rs(out, large, group), gradcomp.NonFiniteError, group)
            expect(f"error-feedback state of parameter '{name}' overflowed" in msg, msg)
            now = rs.state_dict()
            for k in ("residuals", "shared"):
                expect(all(torch.equal(before[k][p], now[k][p]) for p in before[k]), f"FSDP ef21: {k} changed")


def _saved(sd: dict) -> io.BytesIO:
    """sd through torch.save, as a checkpoint holds it."""
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return buf


@check(2)
def zz_a_rank_that_never_comes_is_a_timeout_within_the_deadline(rank, group):
    # Last in its spawn (the group is left with an unanswered collective). Rank 1 never runs backward;
    # rank 0's hook must give up after its deadline with a TimeoutError naming the wait, not hang.
    ddp, state = hooked(group, "int8", "ef", timeout=datetime.timedelta(seconds=3))
    if rank == 1:
        return
    t0 = time.monotonic()
    try:
        train(ddp, batches(rank, 1))
        raise Failed("training went on without rank 1")
    except RuntimeError as e:
        elapsed = time.monotonic() - t0
        expect("TimeoutError" in str(e) and "deadline: 3 s" in str(e), f"not gradcomp's timeout: {e}")
        expect(elapsed < 30, f"gave up after {elapsed:.0f} s, the deadline was 3 s")


@contextlib.contextmanager
def timeouts_counted():
    """Counts the hooks' waits that end in gradcomp's TimeoutError (each module that waits on a
    collective imports wait_within; the DDP hook's worker thread sees the patch too)."""
    from gradcomp.torch import _agreement, _deadline, _exchange, powersgd
    modules, original, count = (_agreement, _exchange, powersgd), _deadline.wait_within, [0]

    def counted(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except gradcomp.TimeoutError:
            count[0] += 1
            raise

    for m in modules:
        m.wait_within = counted
    try:
        yield count
    finally:
        for m in modules:
            m.wait_within = original


def _rank_1_stops_after_a_step(rank, ddp, state, where: str) -> None:
    """Both ranks take a step (the configuration check passes; DDP rebuilds its buckets: five with
    bucket_cap_mb=0.0001); in the next, rank 1 runs the forward (DDP's own collectives) but no backward.
    Rank 0's backward must raise gradcomp's TimeoutError after one deadline of 3 s: the step's later
    buckets fail at once (a PeerFailure: the state is broken) instead of each waiting out the deadline."""
    train(ddp, batches(rank, 1))
    if rank == 1:
        ddp(batches(rank, 1, seed=8)[0][0])
        return
    t0 = time.monotonic()
    with timeouts_counted() as timeouts:
        try:
            train(ddp, batches(rank, 1, seed=8))
            raise Failed("training went on without rank 1")
        except RuntimeError as e:
            state_wait = getattr(state, "wait", None)
            if state_wait:
                state_wait()  # the DDP hook's worker: every bucket of the step handled
            elapsed = time.monotonic() - t0
            expect("TimeoutError" in str(e) and where in str(e) and "deadline: 3 s" in str(e),
                   f"not gradcomp's timeout: {e}")
            expect(timeouts[0] == 1, f"{timeouts[0]} waits of the step timed out, expected 1 (the first bucket's)")
            expect(elapsed < 30, f"gave up after {elapsed:.0f} s, the deadline was 3 s")


@check(2)
def zz_a_rank_that_stops_coming_is_one_powersgd_timeout_within_the_deadline(rank, group):
    ddp, state = powersgd_hooked(group, bucket_cap_mb=0.0001, rank=2, timeout=datetime.timedelta(seconds=3))
    _rank_1_stops_after_a_step(rank, ddp, state, "powersgd_hook")


@check(2)
def zz_a_rank_that_stops_coming_is_one_ddp_hook_timeout_within_the_deadline(rank, group):
    ddp, state = hooked(group, "int8", "ef", bucket_cap_mb=0.0001, timeout=datetime.timedelta(seconds=3))
    _rank_1_stops_after_a_step(rank, ddp, state, "gradcomp reduce-scatter")


# --- the spawn ---------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every wait inside a check gives up after this long (a rank that left a check early, failing, must not
# leave the others in a collective until the barrier's deadline ends the whole spawn); the barrier
# between checks, on a group of its own, waits twice as long, so a rank that timed out still reaches it
# and reports. The whole spawn has SPAWN_DEADLINE (under pytest's per-test timeout).
CHECK_TIMEOUT = datetime.timedelta(seconds=60)
SPAWN_DEADLINE = datetime.timedelta(minutes=10)


def _write_results(out_dir: str, rank: int, results: dict) -> None:
    """After every check (atomically): a spawn that dies later still reports the checks before."""
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(path + ".tmp", path)


def _rank_main(rank: int, world: int, init_file: str, out_dir: str, names: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=CHECK_TIMEOUT)
    # Groups that checks create without a timeout (DeviceMesh's, for HSDP) get the checks' deadline, not
    # torch's 30 minutes: the module constant torch reads when a group is made with timeout=None.
    dist.distributed_c10d.default_pg_timeout = CHECK_TIMEOUT
    between_checks = dist.new_group(list(range(world)), timeout=2 * CHECK_TIMEOUT)
    results = {}
    for name in names:
        group = dist.new_group(list(range(world)), timeout=CHECK_TIMEOUT)
        # Each rank names the check it starts, and one still inside a check after 100 s prints every
        # thread's stack (faulthandler): both reach pytest's captured stderr if a check ever hangs.
        print(f"distributed_checks: rank {rank} of {world} starts {name}", file=sys.stderr, flush=True)
        faulthandler.dump_traceback_later(100, exit=False)
        try:
            CHECKS[name][0](rank, group)
            results[name] = None
        except BaseException as e:  # noqa: BLE001 -- reported to pytest
            results[name] = f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
            print(f"distributed_checks: rank {rank} of {world} failed {name}: {results[name]}", file=sys.stderr,
                  flush=True)
        faulthandler.cancel_dump_traceback_later()
        _write_results(out_dir, rank, results)
        # The check's DDP and FSDP models sit in reference cycles (DDP's reducer hooks; a reduce-scatter
        # holding its module): freed only by the collector. Alive at interpreter exit, their teardown
        # races gloo's threads and aborts the process now and then ("terminate called without an active
        # exception"), failing the spawn after every check has passed.
        gc.collect()
        dist.barrier(group=between_checks)
    dist.destroy_process_group()


SPAWN = "the_spawn_ends_cleanly"


def run_checks(world: int) -> dict[str, list[str]]:
    """{check name: failures (one string per failing rank; empty when it passed)}, and under SPAWN the
    spawn's own error, if any. A spawn that dies (a rank crashed, or timed out at the barrier) fails the
    checks some rank did not report on, with the spawn's error, and only those."""
    names = [n for n, (_, worlds) in CHECKS.items() if world in worlds]
    spawn_error = None
    with tempfile.TemporaryDirectory() as tmp:
        context = mp.start_processes(_rank_main, args=(world, os.path.join(tmp, "init"), tmp, names), nprocs=world,
                                     join=False, start_method="spawn")
        deadline = time.monotonic() + SPAWN_DEADLINE.total_seconds()
        try:
            while not context.join(timeout=max(1.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"the spawn of {world} ranks ran past its {SPAWN_DEADLINE.total_seconds():.0f} s "
                                       f"deadline; its ranks were killed")
        except Exception as e:  # noqa: BLE001 -- becomes the failure of the checks left unreported
            spawn_error = f"{type(e).__name__}: {e}"
        finally:  # also when pytest's own timeout interrupts: no rank outlives its spawn
            for p in context.processes:
                if p.is_alive():
                    p.kill()
                p.join()
        per_rank = []
        for r in range(world):
            path = os.path.join(tmp, f"rank{r}.json")
            per_rank.append(json.load(open(path)) if os.path.exists(path) else {})
    failures = {n: [res[n] for res in per_rank if res.get(n)]
                + [f"rank {r}: no result: the spawn of {world} ranks ended first ({spawn_error})"
                   for r, res in enumerate(per_rank) if n not in res]
                for n in names}
    # A spawn that failed after every check reported (a rank aborting at exit) is a failure of its own.
    failures[SPAWN] = [spawn_error] if spawn_error else []
    return failures
