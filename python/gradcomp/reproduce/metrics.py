"""Metrics that survive noise, from one run's per-step record (the harness's metrics.csv layout).

One evaluation is a snapshot: sign without error feedback on a non-iid split swings by tens of points from
one evaluation to the next, so accuracy is the mean of the last K evaluations (and the best one); training
loss is an exponential moving average. Time and bytes are compared at a target loss, not at equal steps:
steps, bytes and modelled wall time (1 and 10 Gbit/s) until the loss EMA first reaches the target.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field

from ..diagnose import modelled_step_ms

LAST_EVALUATIONS = 5   # accuracy = mean of this many final evaluations
EMA_ALPHA = 0.05       # loss EMA weight of the newest step (a time constant of 20 steps)
LINKS = ("1gbit", "10gbit")
# The links the PyTorch runs are modelled on: the C++ harness's default model_links, so both kinds of
# run are timed on the same networks.
LINK_SPECS = {"1gbit": "inter=1gbit/50us", "10gbit": "inter=10gbit/50us"}


@dataclass
class Run:
    """One run's record: per-step rows, the run's summary (modelled step times) and how it ended."""
    steps: list = field(default_factory=list)         # step index
    loss: list = field(default_factory=list)          # training loss (averaged over workers)
    bytes_sent: list = field(default_factory=list)    # bytes one worker sent in the step
    evaluations: list = field(default_factory=list)   # (step, test accuracy 0..1)
    val_losses: list = field(default_factory=list)    # (step, held-out loss): models without accuracy
    step_ms: dict = field(default_factory=dict)       # link -> [modelled ms of each step]
    diagnosis: str = ""                               # gradcomp.diagnose on the 1 Gbit/s link
    status: str = "ok"                                # ok | diverged | failed
    error: str = ""
    planned_steps: int = 0


def read_metrics_csv(path: str) -> Run:
    run = Run()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            run.steps.append(step)
            run.loss.append(float(row["loss"]))
            run.bytes_sent.append(float(row["bytes_sent"]))
            acc = float(row["test_accuracy"])
            if acc >= 0:
                run.evaluations.append((step, acc))
    return run


def model_step_times(run: Run, summary: dict) -> None:
    """Per-step modelled time on each link, from the harness's summary: its modelled step time is
    compute + the exposed wire and codec time at the run's mean bytes per step; a step's wire share scales
    with the bytes it sent (1-bit Adam's full-precision warm-up steps cost more than its later ones)."""
    mean_bytes = summary.get("bytes_per_step", 0.0) or 1.0
    compute = summary.get("compute_ms", 0.0)
    for link in LINKS:
        step = modelled_step_ms(summary, link)
        if step is None:
            continue
        comm = max(0.0, step - compute)
        run.step_ms[link] = [compute + comm * b / mean_bytes for b in run.bytes_sent]


def model_measured_steps(run: Run, step_seconds, world: int) -> None:
    """Per-step modelled time of a PyTorch DDP run on each link: the step's measured wall time (forward,
    backward, codec, optimizer and the exchange between processes on this machine) plus the cost model's
    wire time for the bytes the step sent, as a ring of `world` ranks, one per node (gradcomp.cost_model;
    every hook alike, with no overlap credited, so DDP's own all-reduce and gradcomp's hook compare
    fairly). Nothing when the record has no step times or a single rank."""
    if not step_seconds or world < 2 or len(step_seconds) != len(run.bytes_sent):
        return
    from .. import _C
    from ..diagnose import diagnose
    ring_share = 2 * (world - 1) / world   # bytes one rank sends per fp32 byte of a ring all-reduce
    wires = {}
    for link in LINKS:
        spec = LINK_SPECS[link]
        wires[link] = [1e3 * _C.predict_allreduce("none", max(1, round(sent / (4 * ring_share))), world, spec,
                                                  algorithm="ring")["wire_seconds"] for sent in run.bytes_sent]
        run.step_ms[link] = [1e3 * t + w for t, w in zip(step_seconds, wires[link])]
    # The diagnosis of a median step on the slow link: the measured step stands for compute (its codec
    # time included: the records do not split it out), the modelled wire time for the exposed part.
    def median(v):
        v = sorted(v[min(5, len(v) - 1):])   # the first steps include DDP's bucket rebuild
        return v[len(v) // 2]
    slow, fast = median(wires[LINKS[0]]), median(wires[LINKS[1]])
    run.diagnosis = diagnose(1e3 * median(list(step_seconds)), slow, slow, wire_ms_slow_link=slow,
                             wire_ms_fast_link=fast).sentence()


def ema(values, alpha=EMA_ALPHA):
    out, m = [], None
    for v in values:
        if not math.isfinite(v):
            out.append(float("nan"))
            continue
        m = v if m is None else (1 - alpha) * m + alpha * v
        out.append(m)
    return out


def run_metrics(run: Run, target_loss: float | None, classes: int | None = 10) -> dict:
    """The numbers a comparison uses. A run that diverged (or failed) counts as what it delivered: chance
    accuracy and an infinite loss, so a variant that diverges on one seed of three is not averaged over
    its two survivors; a target never reached is NaN (and counted as not reached)."""
    nan = float("nan")
    accs = [a for _, a in run.evaluations]
    smoothed = ema(run.loss)
    ok = run.status == "ok"
    m = {
        "accuracy": (100 * sum(accs[-LAST_EVALUATIONS:]) / len(accs[-LAST_EVALUATIONS:]) if accs else nan)
                    if ok else (100.0 / classes if classes else nan),
        "best_accuracy": 100 * max(accs) if accs else nan,
        "loss": (smoothed[-1] if smoothed else nan) if ok else float("inf"),
        "val_loss": (sum(v for _, v in run.val_losses[-LAST_EVALUATIONS:]) /
                     len(run.val_losses[-LAST_EVALUATIONS:]) if run.val_losses else nan) if ok else float("inf"),
        "total_mb": sum(run.bytes_sent) / 1e6,
        "status": run.status,
        "failed_step": run.steps[-1] if not ok and run.steps else None,
    }
    reached = None
    if target_loss is not None:
        reached = next((i for i, v in enumerate(smoothed) if math.isfinite(v) and v <= target_loss), None)
    m["steps_to_target"] = run.steps[reached] + 1 if reached is not None else nan
    m["mb_to_target"] = sum(run.bytes_sent[:reached + 1]) / 1e6 if reached is not None else nan
    for link in LINKS:
        times = run.step_ms.get(link)
        m[f"time_to_target_{link}"] = sum(times[:reached + 1]) / 1e3 if reached is not None and times else nan
    return m


@dataclass
class Aggregate:
    mean: float
    std: float
    low: float
    high: float
    count: int     # seeds with a value (an infinite loss counts: the run diverged)


def aggregate(values) -> Aggregate:
    finite = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]   # inf counts
    if not finite:
        return Aggregate(float("nan"), float("nan"), float("nan"), float("nan"), 0)
    mean = sum(finite) / len(finite)
    if math.isinf(mean):
        return Aggregate(mean, float("nan"), min(finite), max(finite), len(finite))
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / (len(finite) - 1)) if len(finite) > 1 else 0.0
    return Aggregate(mean, std, min(finite), max(finite), len(finite))
