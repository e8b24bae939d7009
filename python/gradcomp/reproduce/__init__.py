"""Paper reproductions: the classic claims of gradient compression, each from one command.

    python -m gradcomp.reproduce --list
    python -m gradcomp.reproduce ef-signsgd          # 5 seeds, writes docs/reproductions.md's section
    python -m gradcomp.reproduce all --quick         # 3 seeds, asserts each claim's ordering (CI)

claims.py holds every claim (paper, setting, variants, checks); backends.py runs a variant (the C++
harness, PyTorch on MNIST-1D, or a codec measurement); metrics.py, verdict.py, plots.py and report.py turn
the runs into numbers, a verdict, a figure and the docs section. The results can be loaded back with
`load(out_dir, name)` (the notebook notebooks/reproductions.ipynb does).
"""

from .claims import CLAIMS, Check, Claim, Variant, claim_named


def load(out_dir: str, name: str, quick: bool = False, root: str = "."):
    """The ClaimResult of a reproduction from its runs under out_dir; a run that is missing there is run
    first, exactly as the command would."""
    from .backends import Context
    from .runner import reproduce
    return reproduce(claim_named(name), Context(root), out_dir, quick)


__all__ = ["CLAIMS", "Check", "Claim", "Variant", "claim_named", "load"]
