"""The error-feedback policies of the DDP hook and the FSDP reduce-scatter: their specs parsed, and the
steps around an exchange that both run (ef21-sgdm's and dgc's momentum before it, dgc's masking and
ef21's estimate after it), so that the two integrations cannot drift apart.

An exchange (_exchange.py) encodes c = x + e per part and keeps e' = c - D(wire) in the residual:
  ef          x = g;
  ef21        the residual holds -h, so c = g - h is what is compressed and e' - g = -(h + D(wire)) is
              the next -h (ef21_estimates_after); the receivers add the shared estimate H;
  ef21-sgdm   ef21 on x = v' = (1 - eta) v + eta g (ef21_sgdm_momentum);
  dgc         x = u' = m u + clip(g) (dgc_momentum), then u' zeroed where the coordinate was sent
              (dgc_masking).
The C++ policies (compressors/error_feedback_policies.cc) are the reference; the distributed checks
compare with them.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple

import torch

from .. import _C
from ._exchange import ExchangeStats, Part
from ._layout import Layout, ResidualStore

ERROR_FEEDBACK = ("none", "ef", "ef:scale=auto", "ef21", "ef21-sgdm:eta=0.1", "dgc:momentum=0.9,clip=0,warmup=0")


class Policy(NamedTuple):
    """An error_feedback spec parsed: its canonical text, the policy's name and its parameters."""

    spec: str
    name: str
    eta: float = 1.0        # ef21-sgdm
    momentum: float = 0.0   # dgc
    clip: float = 0.0       # dgc (0: no clipping)
    warmup: int = 0         # dgc (steps)

    @property
    def shares_estimate(self) -> bool:
        """ef21 and ef21-sgdm: every rank keeps an estimate h and the receivers a shared H."""
        return self.name in ("ef21", "ef21-sgdm")

    @property
    def has_momentum(self) -> bool:
        """ef21-sgdm's v and dgc's u: a momentum that is part of what is sent."""
        return self.name in ("ef21-sgdm", "dgc")


def _options(owner: str, spec: str, defaults: dict[str, str]) -> dict[str, str]:
    """key=value options after the policy's name, each key one of defaults' and given at most once."""
    values, seen = dict(defaults), set()
    for option in spec.partition(":")[2].split(",") if ":" in spec else []:
        key, eq, value = option.partition("=")
        if key not in defaults or not eq:
            raise _C.InvalidArgument(f"{owner}: error_feedback {spec!r}: unknown option {option!r} (takes "
                                     f"{', '.join(k + '=' for k in defaults)})")
        if key in seen:
            raise _C.InvalidArgument(f"{owner}: error_feedback {spec!r}: {key} is given twice")
        seen.add(key)
        values[key] = value
    return values


def _number(owner: str, spec: str, key: str, text: str, ok: Callable[[float], bool], rule: str,
            integral: bool = False) -> float:
    try:
        value = int(text) if integral else float(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise _C.InvalidArgument(f"{owner}: error_feedback {spec!r}: {key} must be {rule}, got {text!r}")
    return value + 0  # -0.0 as 0.0: one canonical spec per value (the ranks compare them)


def parse_error_feedback(spec: str, owner: str = "DDPState") -> Policy:
    """One of ERROR_FEEDBACK parsed: ef21-sgdm takes eta in (0, 1]; dgc momentum in [0, 1), clip >= 0
    (the L2 norm each parameter's gradient is clipped to; 0: none) and warmup >= 0 steps. `owner` names
    the caller in the errors."""
    if isinstance(spec, str) and spec in ERROR_FEEDBACK[:4]:
        return Policy(spec, spec)
    name = spec.partition(":")[0] if isinstance(spec, str) else None
    if name == "ef21-sgdm":
        o = _options(owner, spec, {"eta": "0.1"})
        eta = _number(owner, spec, "eta", o["eta"], lambda v: 0.0 < v <= 1.0, "in (0, 1]")
        return Policy(f"ef21-sgdm:eta={eta!r}", "ef21-sgdm", eta=eta)
    if name == "dgc":
        o = _options(owner, spec, {"momentum": "0.9", "clip": "0", "warmup": "0"})
        # the C++ DgcFeedback's range (its momentum is an fp32 factor below 1)
        m = _number(owner, spec, "momentum", o["momentum"], lambda v: 0.0 <= v <= 0.999999, "in [0, 0.999999]")
        clip = _number(owner, spec, "clip", o["clip"], lambda v: 0.0 <= v < math.inf, "a finite number >= 0")
        warmup = int(_number(owner, spec, "warmup", o["warmup"], lambda v: 0 <= v < 2**32, "an integer in [0, 2^32)",
                             integral=True))
        return Policy(f"dgc:momentum={m!r},clip={clip!r},warmup={warmup}", "dgc", momentum=m, clip=clip,
                      warmup=warmup)
    raise _C.InvalidArgument(f"{owner}: error_feedback must be one of {ERROR_FEEDBACK}, got {spec!r}")


def check_policy_fits(policy: Policy, codec_spec: str, nonfinite: str, owner: str) -> None:
    """The combinations a policy refuses, each with the reason."""
    if policy.name in ("ef21", "ef21-sgdm", "dgc") and nonfinite == "skip":
        raise _C.InvalidArgument(f"{owner}: error_feedback '{policy.spec}' with nonfinite='skip' is not supported "
                                 "(a skipped rank's estimate would move by what it did not send)")
    if policy.name == "dgc" and "rotate=" in codec_spec:
        # The masking needs the coordinates the codec sent; a rotated codec sends mixtures of 2^m of them.
        raise _C.InvalidArgument(f"{owner}: error_feedback 'dgc' with codec {codec_spec!r}: dgc's momentum masking "
                                 "needs the coordinates a codec sends, and a rotated codec (rotate=) sends "
                                 "rotated ones; use it without rotate=")


def ef21_sgdm_momentum(policy: Policy, parts: list[Part], x: torch.Tensor, v: torch.Tensor,
                       v_new: torch.Tensor) -> None:
    """v' = (1 - eta) v + eta g into v_new and into x (what ef21 then sends) for every compressed part;
    v' is committed by the caller once the step has succeeded. The exact parts keep g."""
    keep = 1.0 - policy.eta
    for p in parts:
        if not p.lossless:
            torch.add(v[p.start:p.end].mul(keep), x[p.start:p.end].mul(policy.eta), out=v_new[p.start:p.end])
            x[p.start:p.end].copy_(v_new[p.start:p.end])


def dgc_momentum(policy: Policy, parts: list[Part], params: list[str], x: torch.Tensor, u: torch.Tensor,
                 u_new: torch.Tensor, stats: ExchangeStats, who: str, rank: int) -> None:
    """DGC's momentum correction, u' = m u + clip(g), into u_new and into x (what the rank accumulates and
    sends: the fused encode adds the residual v, c = v + u') for every compressed part. params[i] names
    part i's parameter: clipping scales each parameter's gradient to at most `clip` in L2 norm, over all of
    its parts (FSDP cuts a parameter into one part per destination; a DDP bucket holds it whole).

    A momentum grown past the float range where the gradient is finite restarts from the gradient, with
    a warning (the C++ policy resets its state so); a non-finite gradient is left for the encode to report
    as the NonFiniteError it is."""
    clipped: dict[Part, torch.Tensor] = {p: x[p.start:p.end] for p in parts if not p.lossless}
    if policy.clip > 0:
        # The norm in double, the factor then rounded to fp32, as the C++ policy; kept on the tensor's
        # device: no host sync per part.
        by_param: dict[str, list[Part]] = {}
        for p, name in zip(parts, params):
            if not p.lossless:
                by_param.setdefault(name, []).append(p)
        for group in by_param.values():
            # the parameter's elements in order (FSDP's chunks are its flattened rows), so the norm is the
            # one the C++ policy and the hook take of the whole parameter
            whole = clipped[group[0]] if len(group) == 1 else torch.cat([clipped[p] for p in group])
            norm = torch.linalg.vector_norm(whole, dtype=torch.float64)
            scale = torch.where(norm > policy.clip, policy.clip / norm, 1.0).float()
            for p in group:
                clipped[p] = clipped[p].mul(scale)
    for p, g in clipped.items():
        torch.add(u[p.start:p.end].mul(policy.momentum), g, out=u_new[p.start:p.end])
    if clipped and not bool(torch.isfinite(u_new).all()):  # one host sync per call (other parts hold u's zeros)
        for (p, g), name in zip(clipped.items(), (n for p, n in zip(parts, params) if not p.lossless)):
            if not bool(torch.isfinite(u_new[p.start:p.end]).all()) and bool(torch.isfinite(g).all()):
                u_new[p.start:p.end].copy_(g)
                stats.resets += 1
                warnings.warn(f"{who}: dgc's momentum of {name} overflowed on rank {rank}; reset to zero for "
                              "this step", stacklevel=3)
    for p in clipped:
        x[p.start:p.end].copy_(u_new[p.start:p.end])


def dgc_masking(parts: list[Part], residual_in: torch.Tensor, residual_out: torch.Tensor, u_new: torch.Tensor,
                stats: ExchangeStats) -> None:
    """Momentum factor masking: u' zeroed where the rank sent its coordinate. The C++ policy decodes its
    wire to see where; here the fused encode's v' = c - D(wire) tells: v' is c exactly where D(wire) is 0,
    and differs from c where it is not (a nonzero decoded value is never below half an ulp of the c it
    stands for). That holds for every codec without rotate= (compared with the decode's rule on 500k
    values each); rotated ones are refused (check_policy_fits). c = u' + v, with v zero where the exchange
    reset an overflowed residual (stats.reset_parts)."""
    used = residual_in
    if stats.reset_parts:
        used = residual_in.clone()
        for a, b in stats.reset_parts:
            used[a:b] = 0.0
    for p in parts:
        if not p.lossless:
            sent = residual_out[p.start:p.end] != u_new[p.start:p.end] + used[p.start:p.end]
            u_new[p.start:p.end].masked_fill_(sent, 0.0)


def ef21_estimates_after(parts: list[Part], residual_out: torch.Tensor, sent: torch.Tensor) -> None:
    """ef21's own estimate after a successful exchange: the residual held -h, so the encode compressed
    c = x - h and left e' = c - D(wire); -h' = -(h + D(wire)) = e' - x, with x what was sent (g, or v' for
    ef21-sgdm), taken before the exchange overwrote it."""
    for p in parts:
        if not p.lossless:
            residual_out[p.start:p.end].sub_(sent[p.start:p.end])


def ef21_add_shared_estimate(store: ResidualStore, layout: Layout, parts: list[Part], mean: torch.Tensor) -> None:
    """ef21's receivers: mean (laid out as `layout`) holds the mean of what the ranks sent; H' = H + mean
    is both the gradient returned (written into mean) and the shared estimate kept (committed to store).
    Exact parts keep their exact mean."""
    shared, new_shared = store.current(layout, mean.device), store.scratch(layout)
    new_shared.copy_(shared)
    for p in parts:
        if not p.lossless:
            mean[p.start:p.end].add_(shared[p.start:p.end])
            new_shared[p.start:p.end].copy_(mean[p.start:p.end])
    store.commit(layout)
