"""Runs a claim's variants over its seeds (resuming finished runs), aggregates their metrics and decides
the claim's checks."""

from __future__ import annotations

import math
import os
import re
import sys
import time
from dataclasses import dataclass, field

from .backends import BACKENDS, Context, is_done, record_seconds, reuse_identical, run_seconds
from .claims import Claim
from .metrics import Run, aggregate, run_metrics
from .verdict import decide, verdict


@dataclass
class ClaimResult:
    claim: Claim
    quick: bool
    seeds: list
    runs: dict = field(default_factory=dict)      # label -> [Run or measurement dict per seed]
    stats: dict = field(default_factory=dict)     # label -> metric -> Aggregate
    per_seed: dict = field(default_factory=dict)  # label -> [metrics dict per seed]
    target_loss: float | None = None
    checks: list = field(default_factory=list)    # (Check, passed, numbers)
    verdict: str = ""
    seconds: float = 0.0       # what the claim's runs took when they ran (a resumed run counts its own time)
    wall_seconds: float = 0.0  # this invocation (resumed runs cost nothing)
    ran: int = 0               # runs executed now (the others were resumed)

    def failed_gates(self):
        return [(c, shown) for c, ok, shown in self.checks if c.gate and not ok]


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-").lower() or "run"


def settings_for(claim: Claim, label: str, quick: bool) -> dict:
    settings = dict(claim.base)
    settings.update(claim.variant(label).settings)
    if quick:
        settings.update(claim.quick_settings)
    return settings


def reproduce(claim: Claim, ctx: Context, out_dir: str, quick: bool, log=sys.stderr) -> ClaimResult:
    started = time.monotonic()
    make_request, execute, load = BACKENDS[claim.backend]
    seeds = list(range(1, (claim.quick_seeds if quick else claim.seeds) + 1))
    result = ClaimResult(claim, quick, seeds)
    runs_dir = os.path.join(out_dir, claim.name, "runs")
    for v in variants_to_run(claim, quick):
        settings = settings_for(claim, v.label, quick)
        result.runs[v.label] = []
        for seed in seeds:
            name = f"{slug(v.label)}-s{seed}"
            run_dir = os.path.join(runs_dir, name)
            request = make_request(settings, seed, name, ctx)
            if not is_done(run_dir, request) and not reuse_identical(out_dir, run_dir, request):
                began = time.monotonic()
                execute(run_dir, request, ctx)
                record_seconds(run_dir, time.monotonic() - began)
                result.ran += 1
            result.runs[v.label].append(load(run_dir))
            result.seconds += run_seconds(run_dir)
        print(f"  {claim.name}: {v.label} ({len(seeds)} seeds)", file=log, flush=True)
    _summarise(result)
    result.wall_seconds = time.monotonic() - started
    return result


def variants_to_run(claim: Claim, quick: bool) -> list:
    """Every variant; the quick mode runs only those its gated checks compare (and the reference the target
    loss comes from): it is there to catch a change that breaks a reproduced ordering."""
    if not quick:
        return list(claim.variants)
    if not claim.in_quick:
        return []
    needed = {claim.reference} if claim.reference else set()
    for c in claim.checks:
        if c.gate:
            needed.update(x for x in (c.a, c.b) if x)
    if not any(c.gate for c in claim.checks):
        return []
    return [v for v in claim.variants if v.label in needed]


def _summarise(result: ClaimResult) -> None:
    claim = result.claim
    if claim.backend == "measure":
        for label, runs in result.runs.items():
            result.per_seed[label] = [{"exponent": r.get("exponent", math.nan),
                                       "bound_ratio": r.get("bound_ratio", math.nan)} for r in runs]
    else:
        if claim.reference in result.runs:
            ref = [run_metrics(r, None)["loss"] for r in result.runs[claim.reference]]
            ref_loss = aggregate(ref).mean
            if math.isfinite(ref_loss):
                result.target_loss = ref_loss * claim.target_factor
        classes = None if claim.backend == "char-gpt" else 10   # a language model has no accuracy
        for label, runs in result.runs.items():
            result.per_seed[label] = [run_metrics(r, result.target_loss, classes) for r in runs]
    for label, rows in result.per_seed.items():
        keys = [k for k in rows[0] if k not in ("status", "failed_step")]
        result.stats[label] = {k: aggregate([row[k] for row in rows]) for k in keys}
    result.checks = [(c, *decide(c, result.stats)) for c in claim.checks
                     if c.a in result.stats and (not c.b or c.b in result.stats)]
    if not result.checks:
        result.verdict = "no gated check" if claim.in_quick else "not in quick mode"
        return
    result.verdict = verdict([ok for c, ok, _ in result.checks if not c.observation])


def diverged_count(runs: list) -> int:
    return sum(1 for r in runs if isinstance(r, Run) and r.status != "ok")
