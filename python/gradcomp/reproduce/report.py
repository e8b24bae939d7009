"""docs/reproductions.md: the summary table and one section per claim, each written by the run that
produced it (docs/reproductions.json keeps every claim's latest section, so running one claim rewrites
only its own)."""

from __future__ import annotations

import json
import math
import os
import subprocess

from .claims import CLAIMS
from .metrics import Run
from .runner import ClaimResult, diverged_count

COMMAND = ".venv/bin/python -m gradcomp.reproduce"


def _commit(root: str) -> str:
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        # Only the code counts: the docs (which this command writes too) and the README do not change a run.
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!docs", ":!README.md"], capture_output=True, text=True).stdout.strip()
        return rev + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _num(a, digits=2, unit=""):
    if math.isinf(a.mean):
        return "diverged"
    if math.isnan(a.mean):
        return "–"
    if a.count > 1:
        return f"{a.mean:.{digits}f}{unit} ± {a.std:.{digits}f} [{a.low:.{digits}f}, {a.high:.{digits}f}]"
    return f"{a.mean:.{digits}f}{unit}"


def _to_target(a, modelled=True, digits=3):
    """A to-target number: the mean over the seeds that reached the target, and how many did."""
    if not modelled:
        return "–"
    if a.count == 0:
        return "not reached"
    return f"{a.mean:.{digits}g} ({a.count})"


def variant_table(result: ClaimResult) -> list[str]:
    if result.claim.backend == "measure":
        lines = ["| variant | exponent of d (fit) | measured / bound (largest) |", "|---|---|---|"]
        for label, s in result.stats.items():
            lines.append(f"| {label} | {_num(s['exponent'], 3)} | {_num(s['bound_ratio'], 3)} |")
        return lines
    with_bytes = any(s["total_mb"].mean > 0 for s in result.stats.values())
    modelled = any(r.step_ms for runs in result.runs.values() for r in runs)   # the harness models wall time
    with_accuracy = any(s["accuracy"].count for s in result.stats.values())
    with_val = any(s["val_loss"].count for s in result.stats.values())
    head = ["variant"] + (["accuracy % (last 5 evals)", "best %"] if with_accuracy else []) + \
        (["held-out loss (last 5 evals)"] if with_val else []) + ["final loss (EMA)"]
    if with_bytes:
        head += ["MB sent / worker", "steps to target", "MB to target", "s to target @1 Gbit/s",
                 "s to target @10 Gbit/s"]
    else:
        head += ["steps to target"]
    head += ["diverged"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, s in result.stats.items():
        row = [label] + ([_num(s["accuracy"]), _num(s["best_accuracy"])] if with_accuracy else []) + \
            ([_num(s["val_loss"], 4)] if with_val else []) + [_num(s["loss"], 4)]
        row += [f"{s['total_mb'].mean:.3g}"] if with_bytes else []
        row += [_to_target(s["steps_to_target"])]
        if with_bytes:
            row += [_to_target(s["mb_to_target"]), _to_target(s["time_to_target_1gbit"], modelled),
                    _to_target(s["time_to_target_10gbit"], modelled)]
        row += [f"{diverged_count(result.runs[label])}/{len(result.runs[label])}"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def section(result: ClaimResult, root: str, figure: str) -> str:
    c = result.claim
    seeds = f"{result.seeds[0]}-{result.seeds[-1]}" if len(result.seeds) > 1 else str(result.seeds[0])
    out = [f"## {c.name}", "",
           f"**Paper.** {c.paper}", "",
           f"**Claim.** {c.claim}", "",
           f"**Our setting.** {c.setting} Seeds {seeds}.", "",
           f"**Verdict: {result.verdict}.** " + _verdict_reason(result), ""]
    out += variant_table(result)
    out.append("")
    if result.target_loss is not None:
        out += [f"Target loss: {c.target_factor} x {c.reference}'s mean final training loss (EMA) = "
                f"{result.target_loss:.4f}; to-target columns give the mean over the seeds that reached it (how "
                "many in brackets; – where no wall time is modelled). Numbers: mean ± sd over seeds [lowest, "
                "highest]; a diverged seed counts as chance accuracy and infinite loss.", ""]
    out += ["| check | ours | holds |", "|---|---|---|"]
    for check, ok, shown in result.checks:
        note = " (observation, not in the verdict)" if check.observation else ("" if check.gate else " (not gated)")
        out.append(f"| {check.statement()}{note} | {shown} | "
                   f"{'yes' if ok else '**no**'} |")
    diagnoses = [(label, next((r.diagnosis for r in runs if isinstance(r, Run) and r.diagnosis and r.status == "ok"),
                               "")) for label, runs in result.runs.items()]
    if any(d for _, d in diagnoses):
        out += ["", "**Diagnosis at 1 Gbit/s** (gradcomp.diagnose, first seed of each variant):", ""]
        out += [f"- {label}: {d}" for label, d in diagnoses if d]
    out += ["", f"![{c.name}]({figure})", "",
            f"`{COMMAND} {c.name}` — {len(result.seeds)} seeds, {result.seconds:.0f} s of runs on this machine, "
            f"commit {_commit(root)}.", ""]
    if c.notes:
        out += [c.notes, ""]
    return "\n".join(out)


def _verdict_reason(result: ClaimResult) -> str:
    failed = [check.statement() for check, ok, _ in result.checks if not ok and not check.observation]
    if not failed:
        return "Every check holds."
    return "Does not hold: " + "; ".join(failed) + "."


def short_table(results: list[ClaimResult]) -> str:
    lines = [f"{'reproduction':<26} {'verdict':<16} {'checks':>7} {'seeds':>5} {'time':>6}  key number"]
    for r in results:
        held = sum(1 for c, ok, _ in r.checks if ok and not c.observation)
        key = f"{r.checks[0][0].a}: {r.checks[0][2]}" if r.checks else ""
        lines.append(f"{r.claim.name:<26} {r.verdict:<16} {held:>3}/{sum(1 for c, _, _ in r.checks if not c.observation):<3} {len(r.seeds):>5} "
                     f"{r.seconds:>5.0f}s  {key}")
    return "\n".join(lines)


HEADER = """# Paper reproductions

The classic claims of gradient compression, each reproduced under one harness with several seeds, the
bytes on the wire and modelled wall time, and a verdict written before looking: **reproduced** (every
check holds), **partly** (some do), **not reproduced** (none). A claim that does not reproduce is
reported as such; its settings and checks are in `python/gradcomp/reproduce/claims.py`.

Every section below is written by the command that ran it (`{command} NAME`, or `all`), which also writes
its runs and figures under `results/reproductions/NAME/`; the sections give the command, time and commit.
`{command} all --quick` runs every claim with fewer seeds (and, for the PyTorch claims, fewer steps) and
fails when a gated check fails: the test suite runs it.

Rules of evaluation: accuracy is the mean of the last 5 evaluations (and the best one), never a single
snapshot; training loss is an exponential moving average (weight 0.05 per step); comparisons are also made
at a target loss (1.5x the baseline's final loss): steps, bytes and modelled wall time at 1 and 10 Gbit/s
to reach it. The modelled time is the cost model of collectives/cost_model.h on inter=1gbit/50us and
inter=10gbit/50us, one rank a node. Harness runs: compute and codec times measured, the wire time of the
run's buckets at the link's rate and latency, hidden behind the backward pass where overlap allows.
PyTorch DDP runs (the GPT, MNIST-1D under torchrun): each step's measured wall time plus the wire time of
the bytes it sent, as a ring, no overlap credited (DDP's own all-reduce and gradcomp's hook alike).

## Summary

{summary}
"""


def write_docs(results: list[ClaimResult], root: str, docs_dir: str) -> str:
    """Merges these results into docs/reproductions.json and rewrites docs/reproductions.md from it."""
    store_path = os.path.join(docs_dir, "reproductions.json")
    try:
        with open(store_path) as f:
            store = json.load(f)
    except (OSError, ValueError):
        store = {}
    for r in results:
        claim_checks = [ok for c, ok, _ in r.checks if not c.observation]
        held, total = sum(claim_checks), len(claim_checks)
        store[r.claim.name] = {
            "section": section(r, root, f"reproductions/{r.claim.name}.png"),
            "verdict": r.verdict, "checks": f"{held}/{total}", "seeds": len(r.seeds),
            "seconds": round(r.seconds), "paper": r.claim.paper.split(":")[0],
        }
    rows = ["| reproduction | paper | verdict | checks holding | seeds | time (s) | gated in CI (quick mode) |",
            "|---|---|---|---|---|---|---|"]
    for c in CLAIMS:
        s = store.get(c.name)
        gated = sum(1 for k in c.checks if k.gate)
        quick = "no (time)" if not c.in_quick else (f"{gated} of {len(c.checks)} checks" if gated else "none")
        if s:
            rows.append(f"| [{c.name}](#{c.name}) | {s['paper']} | {s['verdict']} | {s['checks']} | {s['seeds']} | "
                        f"{s['seconds']} | {quick} |")
        else:
            rows.append(f"| {c.name} | {c.paper.split(':')[0]} | not run yet | | | | {quick} |")
    total = sum(store[c.name]["seconds"] for c in CLAIMS if c.name in store)
    rows += ["", f"All of them: {total} s of runs on this 2-core machine (`{COMMAND} all`; a baseline that "
             "several claims share runs once and is counted in each)."]
    text = HEADER.format(command=COMMAND, summary="\n".join(rows))
    for c in CLAIMS:
        if c.name in store:
            text += "\n" + store[c.name]["section"]
    os.makedirs(docs_dir, exist_ok=True)
    with open(store_path + ".tmp", "w") as f:
        json.dump(store, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(store_path + ".tmp", store_path)
    _write_readme_summary(os.path.join(root, "README.md"), rows)
    md = os.path.join(docs_dir, "reproductions.md")
    with open(md + ".tmp", "w") as f:
        f.write(text)
    os.replace(md + ".tmp", md)
    return md


README_BEGIN, README_END = "<!-- reproductions:summary -->", "<!-- /reproductions:summary -->"


def _write_readme_summary(readme: str, rows: list[str]) -> None:
    """The summary table, also in the README between its markers (left alone if they are not there)."""
    try:
        with open(readme) as f:
            text = f.read()
    except OSError:
        return
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        return
    table = "\n".join(r.replace("](#", "](docs/reproductions.md#") for r in rows)
    text = text[:begin + len(README_BEGIN)] + "\n" + table + "\n" + text[end:]
    with open(readme + ".tmp", "w") as f:
        f.write(text)
    os.replace(readme + ".tmp", readme)
