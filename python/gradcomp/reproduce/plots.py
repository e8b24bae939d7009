"""A claim's figure, drawn the way a paper would: one colour per codec family, one line style per
error-feedback policy, curves smoothed (loss EMA) with the band from the lowest to the highest seed, log
axes where the values span decades, the legend outside the axes, and diverged runs marked with an x where
they stopped and counted in the legend.
"""

from __future__ import annotations

import math

from .metrics import ema
from .runner import ClaimResult, diverged_count

# One colour per codec family, the same in every figure (the uncompressed baseline is black).
COLOURS = {
    "none": "black", "sign": "tab:red", "onebit": "tab:orange", "onebit-adam": "tab:red",
    "topk": "tab:blue", "randomk": "tab:orange", "qsgd": "tab:green", "qsgd4": "tab:olive",
    "qsgd2": "tab:purple", "terngrad": "tab:purple", "powersgd": "tab:brown", "powersgd1": "tab:pink",
    "topk+momentum": "navy", "randomk+momentum": "saddlebrown",
    "logistic": "tab:gray", "mlp": "tab:blue", "cnn": "tab:green",
}
# One line style per error-feedback policy.
STYLES = {"none": "-", "ef": (0, (5, 2)), "ef21": (0, (1, 1.5)), "dgc": (0, (6, 2, 1, 2)),
          "ef21-sgdm": (0, (3, 1, 1, 1, 1, 1))}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _band(xs_per_seed, ys_per_seed):
    """Mean, low and high over seeds on the shortest common length (a diverged seed ends early: the band
    stops where it stopped and the x marks it)."""
    n = min(len(y) for y in ys_per_seed)
    xs = xs_per_seed[0][:n]
    cols = list(zip(*[y[:n] for y in ys_per_seed]))
    mean = [sum(c) / len(c) for c in cols]
    return xs, mean, [min(c) for c in cols], [max(c) for c in cols]


def _legend_label(result: ClaimResult, label: str) -> str:
    runs = result.runs[label]
    bad = diverged_count(runs)
    return f"{label}  ({bad}/{len(runs)} diverged)" if bad else label


def plot_claim(result: ClaimResult, path: str) -> None:
    if result.claim.backend == "measure":
        return _plot_measure(result, path)
    plt = _pyplot()
    has_bytes = any(sum(r.bytes_sent) > 0 for runs in result.runs.values() for r in runs)
    # Panel 2: test accuracy, or the held-out loss of a model that has no accuracy (the GPT).
    val_panel = not any(r.evaluations for runs in result.runs.values() for r in runs)
    panels = [("step", "training loss (EMA)"), ("step", "held-out loss" if val_panel else "test accuracy (%)")]
    if has_bytes:
        panels += [("MB sent per worker (cumulative)", "training loss (EMA)")]
    if any(r.step_ms.get("1gbit") for runs in result.runs.values() for r in runs):
        panels += [("modelled wall time at 1 Gbit/s (s)", "training loss (EMA)")]
    cols = 2
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3.6 * rows), squeeze=False)
    axes = [ax for row in axes for ax in row]
    for label, runs in result.runs.items():
        v = result.claim.variant(label)
        colour, style = COLOURS.get(v.family, "tab:cyan"), STYLES.get(v.ef.split(":")[0], "-")
        good = [r for r in runs if r.steps]
        if not good:
            continue
        losses = [ema(r.loss) for r in good]
        x_axes = [
            [r.steps for r in good],
            None,
            [_cumulative([b / 1e6 for b in r.bytes_sent]) for r in good],
            [_cumulative([t / 1e3 for t in r.step_ms.get("1gbit", [])]) if r.step_ms.get("1gbit") else []
             for r in good],
        ]
        for i, ax in enumerate(axes[:len(panels)]):
            if i == 1:
                evals = [r.val_losses if val_panel else r.evaluations for r in good]
                evals = [e for e in evals if e]
                if not evals:
                    continue
                scale = 1 if val_panel else 100
                xs, mean, lo, hi = _band([[s for s, _ in e] for e in evals],
                                         [[scale * a for _, a in e] for e in evals])
            else:
                if any(not xa for xa in x_axes[i]):
                    continue
                xs, mean, lo, hi = _band(x_axes[i], losses)
            ax.plot(xs, mean, color=colour, linestyle=style, linewidth=1.6, label=_legend_label(result, label))
            ax.fill_between(xs, lo, hi, color=colour, alpha=0.15, linewidth=0)
            for r, xa, loss in zip(good, x_axes[i] if i != 1 else [None] * len(good), losses):
                if r.status != "ok":   # where a diverged run stopped
                    if i == 1:
                        if r.evaluations:
                            ax.plot(r.evaluations[-1][0], 100 * r.evaluations[-1][1], "x", color=colour, ms=8)
                    else:
                        finite = [j for j, y in enumerate(loss) if math.isfinite(y)]
                        if finite and xa:
                            j = finite[-1]
                            ax.plot(xa[j], loss[j], "x", color=colour, ms=8, mew=2)
    for i, (ax, (xlabel, ylabel)) in enumerate(zip(axes, panels)):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        # Log axes where the values span a decade or more (losses falling from 2 to 1e-3); linear otherwise.
        low, high = ax.dataLim.y0, ax.dataLim.y1
        if (i != 1 or val_panel) and low > 0 and high / low >= 10:
            ax.set_yscale("log")
        if i >= 2:
            ax.set_xscale("log")
        if i == 1 and not val_panel:
            ax.set_ylim(bottom=max(0, ax.get_ylim()[0]))
    if result.target_loss:
        for i in (0, 2, 3):
            if i < len(panels):
                axes[i].axhline(result.target_loss, color="gray", linewidth=0.8, linestyle=":")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    seeds = len(result.seeds)
    fig.suptitle(f"{result.claim.name}: mean of {seeds} seeds, band = lowest to highest seed"
                 + ("; dotted line: target loss" if result.target_loss else ""), fontsize=11)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _cumulative(values):
    out, total = [], 0.0
    for v in values:
        total += v
        out.append(total)
    return out


def _plot_measure(result: ClaimResult, path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for label, runs in result.runs.items():
        v = result.claim.variant(label)
        colour = COLOURS.get(v.family, "tab:cyan")
        curves = [r["curve"] for r in runs if r.get("curve")]
        if not curves:
            continue
        ds = [c[0] for c in curves[0]]
        errs = [[c[1] for c in curve] for curve in curves]
        mean = [sum(col) / len(col) for col in zip(*errs)]
        ax.plot(ds, mean, "o-", color=colour, label=f"{label}: measured")
        ax.plot(ds, [c[2] for c in curves[0]], linestyle=(0, (4, 2)), color=colour,
                label=f"{label}: bound min(d/s², √d/s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bucket size d")
    ax.set_ylabel("||Q(x) - x||² / ||x||²")
    ax.grid(True, alpha=0.3, which="both")
    ax.set_title(f"QSGD error against bucket size (mean of {len(result.seeds)} seeds)", fontsize=11)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
