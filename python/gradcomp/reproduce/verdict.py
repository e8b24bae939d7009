"""A claim's checks decided on the means over seeds, and the verdict they add up to."""

from __future__ import annotations

import math

from .claims import LOWER_IS_BETTER, Check
from .metrics import Aggregate


def _fmt(value: float, metric: str) -> str:
    if math.isinf(value):
        return "diverged"
    if math.isnan(value):
        return "n/a"
    if metric in ("accuracy", "best_accuracy"):
        return f"{value:.2f} %"
    if metric in ("exponent", "bound_ratio"):
        return f"{value:.3f}"
    return f"{value:.4g}"


def decide(check: Check, stats: dict) -> tuple[bool, str]:
    """(passed, the numbers behind it). stats: variant label -> metric -> Aggregate."""
    a: Aggregate = stats[check.a][check.metric]
    if check.kind == "range":
        lo, hi = check.margin
        return lo <= a.mean <= hi, f"{_fmt(a.mean, check.metric)} (spread {_fmt(a.low, check.metric)} .. " \
                                   f"{_fmt(a.high, check.metric)})"
    b: Aggregate = stats[check.b][check.metric]
    shown = f"{_fmt(a.mean, check.metric)} vs {_fmt(b.mean, check.metric)}"
    if math.isnan(a.mean) or math.isnan(b.mean):
        return False, shown + " (no value)"
    lower = check.metric in LOWER_IS_BETTER
    if check.metric == "accuracy" or not lower:
        diff = a.mean - b.mean
        shown += f" ({diff:+.2f} points)"
        return (diff >= check.margin) if check.kind == "better" else (diff >= -check.margin), shown
    if math.isinf(a.mean):
        return False, shown
    if check.kind == "better":   # b / a: how many times a is smaller
        ratio = b.mean / a.mean if a.mean > 0 else math.inf
        return ratio >= check.margin, shown + f" ({ratio:.2f}x smaller)"
    ratio = a.mean / b.mean if b.mean > 0 else math.inf   # a / b: how many times a is larger
    return ratio <= check.margin, shown + f" ({ratio:.2f}x)"


def verdict(passed: list[bool]) -> str:
    if all(passed):
        return "reproduced"
    if any(passed):
        return "partly"
    return "not reproduced"
