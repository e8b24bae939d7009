#!/usr/bin/env python3
"""End-to-end test of the training commands as a user runs them:
  * `gradcomp train` writes a run directory; a bad config key fails naming the key;
  * an interrupted run (stop_after) resumed with --resume gives the same per-step losses as a run that
    was never interrupted;
  * `gradcomp sweep` runs a small grid, skips finished runs the second time, writes results.csv;
  * scripts/report-training draws the PNGs and report.md from it, and the analysis notebook
    (notebooks/training_analysis.ipynb) executes headless on it;
  * under mpirun -np 2 the same config trains to exactly the losses of 2 in-process workers (the same
    algorithms on another transport give the same bits).
Every subprocess has a timeout."""
import argparse, csv, json, os, shutil, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--gradcomp", required=True)
ap.add_argument("--source", required=True)
ap.add_argument("--mpirun", default="")
a = ap.parse_args()
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(args, timeout=300, expect_ok=True, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    if expect_ok and p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        raise SystemExit(f"FAIL: {' '.join(args)} exited {p.returncode}")
    return p


def losses(run_dir):
    return [row["loss"] for row in csv.DictReader(open(os.path.join(run_dir, "metrics.csv")))]


tmp = tempfile.mkdtemp(prefix="gradcomp_e2e_")
try:
    config = {"name": "tiny", "model": "mlp:hidden=16", "dataset": "blobs:n=400,d=24,classes=3", "workers": 2,
              "steps": 30, "batch_size": 16, "optimizer": "sgd:lr=0.1,momentum=0.9", "codec": "int8", "ef": "ef",
              "min_compress_elements": 64, "eval_every": 10, "seed": 3}
    cfg = os.path.join(tmp, "tiny.json")
    json.dump(config, open(cfg, "w"))

    # One run, and its files.
    run([a.gradcomp, "train", cfg, "--out", os.path.join(tmp, "train"), "--no-progress"])
    straight = os.path.join(tmp, "train", "tiny")
    summary = json.load(open(os.path.join(straight, "summary.json")))
    check(len(losses(straight)) == 30, "train: metrics.csv has one row per step")
    check(summary["compression_ratio"] > 2.0 and 0 <= summary["final_test_accuracy"] <= 1,
          "train: summary.json with compression ratio and accuracy")
    check(json.load(open(os.path.join(straight, "config.json")))["codec"] == "int8", "train: resolved config.json")

    # Bad input: named, exit status 1, nothing half-written.
    p = run([a.gradcomp, "train", cfg, "--set", "codecs=int8", "--out", os.path.join(tmp, "bad")], expect_ok=False)
    check(p.returncode == 1 and "unknown config key 'codecs'" in p.stderr, "train: a bad key fails naming it")
    p = run([a.gradcomp, "train", cfg, "--set", "codec=int9", "--out", os.path.join(tmp, "bad")], expect_ok=False)
    check(p.returncode == 1 and "int9" in p.stderr, "train: an unknown codec fails naming it")

    # Interrupted at step 17 (checkpoint at 15), resumed: the same losses as the straight run.
    out2 = os.path.join(tmp, "resume")
    run([a.gradcomp, "train", cfg, "--out", out2, "--set", "stop_after=17", "--set", "checkpoint_every=5",
         "--no-progress"])
    check(not os.path.exists(os.path.join(out2, "tiny", "summary.json")), "resume: an interrupted run has no summary")
    run([a.gradcomp, "train", cfg, "--out", out2, "--set", "checkpoint_every=5", "--resume", "--no-progress"])
    check(losses(os.path.join(out2, "tiny")) == losses(straight), "resume: per-step losses identical to the straight run")

    # A sweep, skipped when finished, then the report and the notebook.
    sweep = {"base": config, "grid": {"codec": ["none", "sign"]}, "cases": [{"name": "ef", "ef": "ef"}]}
    sweep_file = os.path.join(tmp, "sweep.json")
    json.dump(sweep, open(sweep_file, "w"))
    sdir = os.path.join(tmp, "sweep")
    first = run([a.gradcomp, "sweep", sweep_file, "--out", sdir, "--no-progress"]).stdout
    rows = list(csv.DictReader(open(os.path.join(sdir, "results.csv"))))
    check([r["name"] for r in rows] == ["ef,codec=none", "ef,codec=sign"], "sweep: results.csv has both runs")
    second = run([a.gradcomp, "sweep", sweep_file, "--out", sdir, "--no-progress"]).stdout
    check(second.count("done before, skipped") == 2, "sweep: finished runs are skipped")
    run([os.path.join(a.source, "scripts", "report-training"), sdir])
    for f in ["loss_vs_step.png", "loss_vs_bytes.png", "loss_vs_time.png", "accuracy_vs_step.png", "codec_bars.png"]:
        check(os.path.getsize(os.path.join(sdir, f)) > 5000, f"report: {f} drawn")
    report = open(os.path.join(sdir, "report.md")).read()
    check("| ef,codec=sign |" in report and "![Loss vs bytes sent](loss_vs_bytes.png)" in report, "report: table and figures")
    jupyter = os.path.join(a.source, ".venv", "bin", "jupyter")
    executed = os.path.join(tmp, "executed.ipynb")
    run([jupyter, "nbconvert", "--to", "notebook", "--execute", "--output", executed,
         os.path.join(a.source, "notebooks", "training_analysis.ipynb")], timeout=300,
        env=dict(os.environ, RESULTS_DIR=sdir))
    text = "".join("".join(o.get("text", "")) for c in json.load(open(executed))["cells"] for o in c.get("outputs", []))
    check("2 runs in" in text and "ef,codec=sign" in text, "notebook: executed headless on the sweep")
    check(os.path.getsize(os.path.join(sdir, "notebook_tradeoffs.png")) > 5000, "notebook: figure drawn")

    # MPI: the same run as 2 processes gives the same losses as 2 threads.
    if a.mpirun:
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        run([a.mpirun, "-np", "2", "--oversubscribe", a.gradcomp, "train", cfg, "--out", os.path.join(tmp, "mpi"),
             "--no-progress"], timeout=300, env=env)
        check(losses(os.path.join(tmp, "mpi", "tiny")) == losses(straight),
              "mpi: 2 processes train to the same per-step losses as 2 threads")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print("FAILED: %d checks" % len(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
