"""What runs one (variant, seed) of a claim, and how its result is kept so that a rerun resumes.

harness  the C++ harness: `gradcomp train CONFIG` with the claim's base setting, the variant's changes and
         the seed; its run directory (config.json, metrics.csv, summary.json) is the record.
mnist1d  PyTorch models on MNIST-1D (mnist1d_models.py), one process; the record is run.json.
mnist1d-ddp
         MNIST-1D under torchrun: DDP with gradcomp's hook in real gloo processes (mnist1d_ddp.py).
char-gpt examples/torch/train_gpt.py under torchrun: the character-level GPT on Shakespeare, trained with
         DDP and gradcomp's hook in real gloo processes; the record is its summary.json.
measure  a codec statistic computed from Python through gradcomp.Codec (no training).

Every run directory also holds request.json (exactly what was asked) and outcome.json (how it ended); a
rerun skips a run whose request.json matches, so an interrupted reproduction continues where it stopped,
like `gradcomp sweep`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

from ..diagnose import diagnose_summary
from .metrics import Run, model_measured_steps, model_step_times, read_metrics_csv


class Context:
    """Where things are: the C++ command line tool, the data folder."""

    def __init__(self, root: str, gradcomp_cli: str | None = None):
        self.root = os.path.abspath(root)
        self.data_dir = os.path.join(self.root, "data")
        self._cli = gradcomp_cli or os.environ.get("GRADCOMP_CLI")

    def cli(self) -> str:
        if self._cli:
            return self._cli
        for build in ("build", "build-ci"):
            path = os.path.join(self.root, build, "experiments", "gradcomp")
            if os.access(path, os.X_OK):
                self._cli = path
                return path
        raise FileNotFoundError("the gradcomp command line tool was not found under build/ or build-ci/ of "
                                f"{self.root}: build it (scripts/run-demo does) or pass --gradcomp PATH")


def _load_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path: str, value) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def is_done(run_dir: str, request: dict) -> bool:
    return _load_json(os.path.join(run_dir, "request.json")) == request and \
        os.path.exists(os.path.join(run_dir, "outcome.json"))


def _without_name(request: dict) -> dict:
    return {k: v for k, v in request.items() if k != "name"}


def reuse_identical(out_dir: str, run_dir: str, request: dict) -> bool:
    """Copies a finished run of the same request from another claim (claims share their baselines: the
    digits SGD run is the reference of five of them) instead of training it again."""
    wanted = _without_name(request)
    for claim in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []:
        runs = os.path.join(out_dir, claim, "runs")
        for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
            other = os.path.join(runs, name)
            if other == run_dir or not os.path.exists(os.path.join(other, "outcome.json")):
                continue
            asked = _load_json(os.path.join(other, "request.json"))
            if asked is not None and _without_name(asked) == wanted:
                shutil.rmtree(run_dir, ignore_errors=True)
                shutil.copytree(other, run_dir)
                _write_json(os.path.join(run_dir, "request.json"), request)
                return True
    return False


def start(run_dir: str, request: dict) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    _write_json(os.path.join(run_dir, "request.json"), request)


def finish(run_dir: str, status: str, error: str = "") -> None:
    _write_json(os.path.join(run_dir, "outcome.json"), {"status": status, "error": error})


def record_seconds(run_dir: str, seconds: float) -> None:
    """How long the run took, kept in outcome.json: a claim's time counts its runs even when resumed."""
    path = os.path.join(run_dir, "outcome.json")
    outcome = _load_json(path) or {"status": "failed", "error": "no outcome"}
    outcome["seconds"] = round(seconds, 3)
    _write_json(path, outcome)


def run_seconds(run_dir: str) -> float:
    return float((_load_json(os.path.join(run_dir, "outcome.json")) or {}).get("seconds", 0.0))


# --- harness ------------------------------------------------------------------------------------------

def harness_request(settings: dict, seed: int, name: str, ctx: Context) -> dict:
    config = dict(settings)
    config.update({"name": name, "seed": seed, "data_dir": ctx.data_dir})
    return config


def run_harness(run_dir: str, request: dict, ctx: Context) -> None:
    start(run_dir, request)
    config_path = os.path.join(run_dir, "request.json")
    parent = os.path.dirname(run_dir)
    proc = subprocess.run([ctx.cli(), "train", config_path, "--out", parent, "--overwrite", "--no-progress"],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        finish(run_dir, "ok")
        return
    error = (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]
    # A non-finite gradient or loss is the training diverging (what the run reports, not a tool failure).
    diverged = "non-finite" in error or "diverged" in error or "not finite" in error
    finish(run_dir, "diverged" if diverged else "failed", error)


def load_harness(run_dir: str) -> Run:
    outcome = _load_json(os.path.join(run_dir, "outcome.json")) or {"status": "failed", "error": "no outcome"}
    metrics_path = os.path.join(run_dir, "metrics.csv")
    run = read_metrics_csv(metrics_path) if os.path.exists(metrics_path) else Run()
    run.status, run.error = outcome["status"], outcome.get("error", "")
    request = _load_json(os.path.join(run_dir, "request.json")) or {}
    run.planned_steps = int(request.get("steps", len(run.steps)))
    summary = _load_json(os.path.join(run_dir, "summary.json"))
    if summary:
        model_step_times(run, summary)
        run.diagnosis = diagnose_summary(summary).sentence()
    return run


# --- mnist1d (PyTorch) --------------------------------------------------------------------------------

def run_mnist1d(run_dir: str, request: dict, ctx: Context) -> None:
    from .mnist1d_models import train  # imports torch: only the claims that need it pay for it
    start(run_dir, request)
    record = train(request, ctx.data_dir)
    _write_json(os.path.join(run_dir, "run.json"), record)
    finish(run_dir, record["status"], record.get("error", ""))


def run_mnist1d_ddp(run_dir: str, request: dict, ctx: Context) -> None:
    """mnist1d_ddp.py under torchrun: `world` gloo processes, DDP with gradcomp's hook (or DDP's own)."""
    start(run_dir, request)
    record = os.path.join(run_dir, "run.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(request["world"]),
           "-m", "gradcomp.reproduce.mnist1d_ddp", os.path.join(run_dir, "request.json"), record, ctx.data_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    outcome = _load_json(record)
    if outcome is None:
        error = (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]
        finish(run_dir, "failed", error)
    else:
        finish(run_dir, outcome["status"], outcome.get("error", ""))


def load_mnist1d(run_dir: str) -> Run:
    record = _load_json(os.path.join(run_dir, "run.json")) or {}
    outcome = _load_json(os.path.join(run_dir, "outcome.json")) or {"status": "failed"}
    run = Run(steps=record.get("steps", []), loss=record.get("loss", []),
              bytes_sent=record.get("bytes_sent", [0.0] * len(record.get("steps", []))),
              evaluations=[tuple(e) for e in record.get("evaluations", [])])
    run.status, run.error = outcome["status"], outcome.get("error", "")
    run.planned_steps = int(record.get("planned_steps", len(run.steps)))
    model_measured_steps(run, record.get("step_seconds"), int(record.get("world", 1)))
    return run


# --- char-gpt (PyTorch DDP with gradcomp's hook, real processes) --------------------------------------

GPT_FLAGS = ("hook", "codec", "ef", "algorithm", "min_numel", "steps", "batch", "block", "layers", "embd",
             "heads", "lr", "eval_every", "eval_batches", "seed")


def run_char_gpt(run_dir: str, request: dict, ctx: Context) -> None:
    """examples/torch/train_gpt.py under torchrun (gloo, `world` processes of one thread each): the
    character-level GPT on Shakespeare with the DDP hook, exactly as a user runs it."""
    start(run_dir, request)
    summary = os.path.join(run_dir, "summary.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(request["world"]), os.path.join(ctx.root, "examples", "torch", "train_gpt.py"),
           "--summary", summary, "--no-progress", "--data", os.path.join(ctx.data_dir, "shakespeare")]
    for key in GPT_FLAGS:
        if key in request:
            cmd += ["--" + key.replace("_", "-"), str(request[key])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode == 0 and os.path.exists(summary):
        finish(run_dir, "ok")
        return
    lines = [l for l in proc.stderr.splitlines() if "train_gpt:" in l] or proc.stderr.strip().splitlines() or [""]
    error = lines[-1]
    finish(run_dir, "diverged" if "the loss is" in error else "failed", error)


def load_char_gpt(run_dir: str) -> Run:
    summary = _load_json(os.path.join(run_dir, "summary.json")) or {}
    outcome = _load_json(os.path.join(run_dir, "outcome.json")) or {"status": "failed"}
    losses = summary.get("train_losses", [])
    run = Run(steps=list(range(len(losses))), loss=losses, bytes_sent=summary.get("bytes_sent", [0.0] * len(losses)),
              val_losses=[(e["step"] - 1, e["val_loss"]) for e in summary.get("evals", [])])
    run.status, run.error = outcome["status"], outcome.get("error", "")
    run.planned_steps = int(summary.get("steps", len(losses)))
    model_measured_steps(run, summary.get("step_seconds"), int(summary.get("world", 1)))
    return run


# --- measure (codec statistics) -----------------------------------------------------------------------

def run_qsgd_variance(run_dir: str, request: dict, ctx: Context) -> None:
    """Normalised error ||Q(x) - x||^2 / ||x||^2 of QSGD on N(0, 1) values against the bucket size d, and
    its ratio to the paper's bound min(d / s^2, sqrt(d) / s)."""
    import numpy as np
    import gradcomp
    start(run_dir, request)
    bits, seed = int(request["bits"]), int(request["seed"])
    s = 2 ** (bits - 1) - 1
    x = np.random.default_rng(seed).standard_normal(int(request["values"])).astype(np.float32)
    curve = []
    for d in request["buckets"]:
        codec = gradcomp.Codec(f"qsgd:bits={bits},block={d}")
        y = codec.decode(codec.encode(x, seed=seed).wire)
        err = float(np.sum((y.astype(np.float64) - x) ** 2) / np.sum(x.astype(np.float64) ** 2))
        curve.append((d, err, min(d / s ** 2, math.sqrt(d) / s)))
    fit = [(math.log(d), math.log(e)) for d, e, _ in curve if d >= 16 * s * s]
    mx = sum(p for p, _ in fit) / len(fit)
    my = sum(q for _, q in fit) / len(fit)
    exponent = sum((p - mx) * (q - my) for p, q in fit) / sum((p - mx) ** 2 for p, _ in fit)
    _write_json(os.path.join(run_dir, "run.json"), {
        "curve": curve, "exponent": exponent, "bound_ratio": max(e / b for _, e, b in curve), "levels": s})
    finish(run_dir, "ok")


def load_measure(run_dir: str) -> dict:
    return _load_json(os.path.join(run_dir, "run.json")) or {}


BACKENDS = {
    "harness": (harness_request, run_harness, load_harness),
    "mnist1d": (lambda settings, seed, name, ctx: dict(settings, seed=seed), run_mnist1d, load_mnist1d),
    "measure": (lambda settings, seed, name, ctx: dict(settings, seed=seed), run_qsgd_variance, load_measure),
    "mnist1d-ddp": (lambda settings, seed, name, ctx: dict(settings, seed=seed), run_mnist1d_ddp, load_mnist1d),
    "char-gpt": (lambda settings, seed, name, ctx: dict(settings, seed=seed), run_char_gpt, load_char_gpt),
}
