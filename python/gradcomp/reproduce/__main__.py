"""python -m gradcomp.reproduce NAME... | all [--quick] [--out DIR] [--no-docs] [--list]

Runs the named paper reproductions (see claims.py), resuming finished runs, writes their runs and figures
under --out/NAME/ and (full mode) their sections of docs/reproductions.md; prints the short table. Exit
status 1 when a gated check fails in the quick mode (or with --strict), 2 for a bad command line."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from .backends import Context
from .claims import CLAIMS, claim_named


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gradcomp.reproduce", description=__doc__.split("\n\n")[1])
    p.add_argument("names", nargs="*", help="reproductions to run, or 'all'")
    p.add_argument("--quick", action="store_true",
                   help="fewer seeds (and steps for the PyTorch claims); checks the gated orderings; no docs")
    p.add_argument("--out", default=None, help="results folder (default results/reproductions, "
                                               "results/reproductions-quick with --quick)")
    p.add_argument("--root", default=".", help="the repository (data/, build/, docs/); default: here")
    p.add_argument("--gradcomp", default=None, help="the gradcomp command line tool (default: build/ or "
                                                    "build-ci/ under --root, or $GRADCOMP_CLI)")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/reproductions.md")
    p.add_argument("--strict", action="store_true", help="exit 1 when a gated check fails (the quick default)")
    p.add_argument("--list", action="store_true", help="list the reproductions and exit")
    a = p.parse_args(argv)
    if a.list:
        for c in CLAIMS:
            print(f"{c.name:<20} {c.paper}")
        return 0
    if not a.names:
        p.error("name at least one reproduction, or 'all' (--list shows them)")
    try:
        claims = list(CLAIMS) if a.names == ["all"] else [claim_named(n) for n in a.names]
    except KeyError as e:
        p.error(str(e.args[0]))
    ctx = Context(a.root, a.gradcomp)
    out = a.out or os.path.join(ctx.root, "results", "reproductions-quick" if a.quick else "reproductions")

    from .plots import plot_claim
    from .report import short_table, write_docs
    from .runner import reproduce

    results = []
    for claim in claims:
        print(f"{claim.name}: {claim.paper}", file=sys.stderr, flush=True)
        try:
            r = reproduce(claim, ctx, out, a.quick)
        except FileNotFoundError as e:
            print(f"gradcomp.reproduce: {e}", file=sys.stderr)
            return 2
        figure = os.path.join(out, claim.name, f"{claim.name}.png")
        if r.runs:
            plot_claim(r, figure)
        results.append(r)
        for check, ok, shown in r.checks:
            print(f"    {'holds' if ok else 'FAILS'}: {check.statement()}: {shown}", file=sys.stderr)
        print(f"  -> {r.verdict} ({r.wall_seconds:.0f} s, {r.ran} runs now, the rest resumed)", file=sys.stderr)
        if not a.quick and not a.no_docs:
            figures = os.path.join(ctx.root, "docs", "reproductions")
            os.makedirs(figures, exist_ok=True)
            shutil.copyfile(figure, os.path.join(figures, f"{claim.name}.png"))
    if not a.quick and not a.no_docs:
        md = write_docs(results, ctx.root, os.path.join(ctx.root, "docs"))
        print(f"wrote {os.path.relpath(md, ctx.root)}", file=sys.stderr)
    print(short_table(results))
    failed = [(r.claim.name, c, shown) for r in results for c, shown in r.failed_gates()]
    if failed and (a.quick or a.strict):
        for name, c, shown in failed:
            print(f"gradcomp.reproduce: {name}: gated check failed: {c.statement()}: {shown}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
