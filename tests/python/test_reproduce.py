"""The paper reproductions (python -m gradcomp.reproduce): the quick mode of every claim, which fails when a
reproduced ordering breaks; the notebook on its results; and the metric, verdict and command-line rules
they rest on, with exact values."""

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO
from gradcomp.reproduce import CLAIMS, Check, claim_named
from gradcomp.reproduce.metrics import LAST_EVALUATIONS, Run, aggregate, ema, run_metrics
from gradcomp.reproduce.runner import variants_to_run
from gradcomp.reproduce.verdict import decide, verdict


def _reproduce(*args, **kw):
    return subprocess.run([sys.executable, "-m", "gradcomp.reproduce", *args], capture_output=True, text=True,
                          cwd=REPO, **kw)


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory, gradcomp_cli):
    out = tmp_path_factory.mktemp("reproductions-quick")
    p = _reproduce("all", "--quick", "--out", str(out), "--gradcomp", str(gradcomp_cli), timeout=600)
    return out, p


def test_quick_mode_holds_every_gated_ordering(quick_results):
    out, p = quick_results
    assert p.returncode == 0, p.stdout + p.stderr
    table = p.stdout
    # Each claim with a gated check appears in the short table with its verdict.
    for c in CLAIMS:
        if any(k.gate for k in c.checks):
            assert c.name in table, table
    # The gated checks are what decides the exit status: none of them failed.
    assert "gated check failed" not in p.stderr
    # The runs are on disk, one folder per variant and seed, with what was asked and how it ended.
    run_dir = out / "ef-signsgd" / "runs" / "sign-ef-s1"
    assert json.loads((run_dir / "outcome.json").read_text())["status"] == "ok"
    assert json.loads((run_dir / "request.json").read_text())["codec"] == "sign"
    assert (out / "ef-signsgd" / "ef-signsgd.png").stat().st_size > 20000


def test_a_second_run_resumes_every_finished_run(quick_results, gradcomp_cli):
    out, _ = quick_results
    p = _reproduce("ef-signsgd", "--quick", "--out", str(out), "--gradcomp", str(gradcomp_cli), timeout=120)
    assert p.returncode == 0, p.stderr
    assert ", 0 runs now, the rest resumed)" in p.stderr, p.stderr


def test_notebook_executes_headless_on_the_quick_results(quick_results, tmp_path):
    out, _ = quick_results
    executed = tmp_path / "executed.ipynb"
    env = dict(os.environ, REPRODUCTIONS_DIR=str(out), REPRODUCTIONS_QUICK="1", REPO_ROOT=str(REPO),
               MPLBACKEND="Agg")
    subprocess.run([str(REPO / ".venv" / "bin" / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
                    "--output", str(executed), str(REPO / "notebooks" / "reproductions.ipynb")],
                   check=True, timeout=600, env=env, capture_output=True)
    text = "".join("".join(o.get("text", "")) for c in json.loads(executed.read_text())["cells"]
                   for o in c.get("outputs", []))
    assert "ef-signsgd: reproduced" in text, text[:2000]
    assert (out / "notebook_accuracy_by_claim.png").stat().st_size > 10000


def test_bad_command_lines_exit_2_naming_the_problem(tmp_path):
    p = _reproduce("no-such-claim")
    assert p.returncode == 2 and "no reproduction named 'no-such-claim'" in p.stderr
    p = _reproduce()
    assert p.returncode == 2 and "name at least one reproduction" in p.stderr
    p = _reproduce("ef-signsgd", "--gradcomp", "/nonexistent/gradcomp", "--out", str(tmp_path))
    assert p.returncode == 2 and "/nonexistent/gradcomp" in p.stderr, p.stderr


def test_list_names_every_claim():
    p = _reproduce("--list")
    assert p.returncode == 0
    for c in CLAIMS:
        assert c.name in p.stdout
    assert {"ef-signsgd", "dgc", "qsgd", "terngrad", "sparsified-memory", "powersgd", "onebit-adam", "ef21",
            "onebit-sgd"} <= {c.name for c in CLAIMS}


def _run(losses, accs, status="ok", bytes_per_step=100.0):
    r = Run(steps=list(range(len(losses))), loss=list(losses), bytes_sent=[bytes_per_step] * len(losses),
            evaluations=[(i, a) for i, a in accs], status=status)
    r.step_ms = {"1gbit": [2.0] * len(losses), "10gbit": [1.0] * len(losses)}
    return r


def test_accuracy_is_the_mean_of_the_last_evaluations_and_divergence_counts_as_chance():
    accs = [(i, a) for i, a in enumerate([0.1, 0.2, 0.5, 0.6, 0.7, 0.8, 0.9])]
    m = run_metrics(_run([1.0] * 7, accs), None)
    assert LAST_EVALUATIONS == 5
    assert m["accuracy"] == pytest.approx(100 * (0.5 + 0.6 + 0.7 + 0.8 + 0.9) / 5)
    assert m["best_accuracy"] == pytest.approx(90.0)
    d = run_metrics(_run([1.0, float("nan")], accs[:1], status="diverged"), None)
    assert d["accuracy"] == 10.0 and math.isinf(d["loss"]) and d["failed_step"] == 1
    # An infinite loss stays in the mean: a variant that diverged on one seed is not averaged over survivors.
    assert math.isinf(aggregate([0.1, float("inf")]).mean)
    assert aggregate([1.0, 3.0]).std == pytest.approx(math.sqrt(2.0))


def test_to_target_metrics_count_steps_bytes_and_modelled_time_until_the_ema_reaches_it():
    assert ema([1.0, 0.0], alpha=0.5) == [1.0, 0.5]
    losses = [1.0] + [0.0] * 99           # EMA with alpha 0.05: 0.95^k after k zero steps
    m = run_metrics(_run(losses, [(99, 1.0)]), target_loss=0.5)
    k = math.ceil(math.log(0.5) / math.log(0.95))   # first k with 0.95^k <= 0.5: 14
    assert m["steps_to_target"] == k + 1
    assert m["mb_to_target"] == pytest.approx((k + 1) * 100 / 1e6)
    assert m["time_to_target_1gbit"] == pytest.approx((k + 1) * 2.0 / 1e3)
    assert m["time_to_target_10gbit"] == pytest.approx((k + 1) * 1.0 / 1e3)
    never = run_metrics(_run([1.0] * 10, [(9, 1.0)]), target_loss=0.5)
    assert math.isnan(never["steps_to_target"]) and math.isnan(never["time_to_target_1gbit"])


def _stats(**means):
    return {label: {metric: aggregate([v]) for metric, v in values.items()} for label, values in means.items()}


def test_checks_decide_on_the_means_with_their_margins():
    s = _stats(a={"accuracy": 97.0, "loss": 0.01, "total_mb": 2.0}, b={"accuracy": 94.9, "loss": 0.05,
                                                                       "total_mb": 20.0})
    assert decide(Check("better", "accuracy", "a", "b", 2.0), s)[0]
    assert not decide(Check("better", "accuracy", "a", "b", 2.2), s)[0]
    assert decide(Check("close", "accuracy", "b", "a", 2.1), s)[0]
    assert not decide(Check("close", "accuracy", "b", "a", 2.0), s)[0]
    assert decide(Check("better", "loss", "a", "b", 5.0), s)[0]        # 0.05 / 0.01 = 5x
    assert not decide(Check("better", "loss", "a", "b", 5.1), s)[0]
    assert decide(Check("close", "total_mb", "b", "a", 10.0), s)[0]    # 20 / 2 = 10x
    assert not decide(Check("close", "total_mb", "b", "a", 9.9), s)[0]
    assert decide(Check("range", "accuracy", "a", margin=(96.0, 98.0)), s)[0]
    diverged = {"x": {"loss": aggregate([float("inf")])}, "y": {"loss": aggregate([0.1])}}
    assert decide(Check("better", "loss", "y", "x", 100.0), diverged)[0]
    assert not decide(Check("close", "loss", "x", "y", 100.0), diverged)[0]
    assert verdict([True, True]) == "reproduced"
    assert verdict([True, False]) == "partly"
    assert verdict([False, False]) == "not reproduced"


def test_quick_mode_runs_only_the_variants_its_gated_checks_compare():
    c = claim_named("ef21")
    assert not any(k.gate for k in c.checks) and variants_to_run(c, quick=True) == []
    assert len(variants_to_run(c, quick=False)) == len(c.variants)
    d = claim_named("dgc")
    assert {v.label for v in variants_to_run(d, quick=True)} == {"sgd", "topk0.1%+dgc"}
    for claim in CLAIMS:   # every check names variants the claim has; an observation is never gated
        for k in claim.checks:
            assert not (k.observation and k.gate), (claim.name, k)
            claim.variant(k.a)
            if k.b:
                claim.variant(k.b)


def test_observations_are_shown_but_left_out_of_the_verdict(tmp_path):
    from gradcomp.reproduce.runner import ClaimResult, _summarise
    claim = claim_named("ef21")
    result = ClaimResult(claim, False, [1])
    run = _run([1.0] + [0.01] * 99, [(99, 0.9)])   # final loss EMA about 0.016
    worse = _run([2.0] * 100, [(99, 0.5)])          # 2.0: 100x more, 40 points less
    for v in claim.variants:   # ef21 and its momentum twin far behind; ef21-sgdm level with ef
        result.runs[v.label] = [worse if "ef21" in v.label and "sgdm" not in v.label else run]
    _summarise(result)
    observed = [ok for c, ok, _ in result.checks if c.observation]
    assert observed == [False, True]              # the momentum pair fails, ef21-sgdm holds
    assert result.verdict == "not reproduced"     # the observation that held does not make it "partly"
