#!/usr/bin/env python3
"""End-to-end test of the training commands as a user runs them:
  * `gradcomp train` writes a run directory; a bad config key fails naming the key;
  * an interrupted run (stop_after) resumed with --resume gives the same per-step losses as a run that
    was never interrupted;
  * `gradcomp sweep` runs a small grid, skips finished runs the second time, writes results.csv;
  * scripts/report-training draws the PNGs and report.md from it, and the analysis notebook
    (notebooks/training_analysis.ipynb) executes headless on it;
  * under mpirun -np 2 the same config trains to exactly the losses of 2 in-process workers (the same
    algorithms on another transport give the same bits);
  * bad input never aborts (exit 134) and never silently reinterprets: a config that is not an object, an
    --out under a file or unwritable, negative / fractional values, --resume without a checkpoint, an
    existing run directory without --overwrite, a sweep whose stored runs came from another config, a
    sweep with a failed run -- each one line on stderr and exit status 1.
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


def fails(args, text, what):
    """The command must exit 1 with exactly one line on stderr, naming the problem."""
    p = run(args, expect_ok=False)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = p.returncode == 1 and len(lines) == 1 and lines[0].startswith("gradcomp: ") and text in lines[0]
    if not ok:
        print(f"exit {p.returncode}, stderr: {p.stderr[-1500:]}")
    check(ok, what)


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

    # Bad input from the review: each a one-line error with exit status 1, none an abort.
    array_cfg = os.path.join(tmp, "array.json")
    json.dump([config], open(array_cfg, "w"))
    fails([a.gradcomp, "train", array_cfg, "--out", os.path.join(tmp, "bad")], "must hold a JSON object",
          "train: a config that is a JSON array is refused")
    a_file = os.path.join(tmp, "a-file")
    open(a_file, "w").write("x")
    fails([a.gradcomp, "train", cfg, "--out", os.path.join(a_file, "sub")], "exists and is not a directory",
          "train: --out under a regular file is refused")
    fails([a.gradcomp, "train", cfg, "--out", "/proc/gradcomp-results"], "cannot be created",
          "train: an --out that cannot be created is refused")
    fails([a.gradcomp, "train", cfg, "--set", "batch_size=-1", "--out", os.path.join(tmp, "bad")],
          "'batch_size': -1 is not an integer in [1, 1048576]", "train: batch_size=-1 is refused naming the range")
    for bad in ("steps=-5", "steps=600.7", "eval_every=-1", "seed=-1", "min_compress_elements=-1"):
        fails([a.gradcomp, "train", cfg, "--set", bad, "--out", os.path.join(tmp, "bad")], "is not an integer in",
              f"train: {bad} is refused, not wrapped around or truncated")
    fails([a.gradcomp, "train", cfg, "--set", "name=tinyy", "--resume", "--out", os.path.join(tmp, "train")],
          "--resume: no checkpoint in '" + os.path.join(tmp, "train", "tinyy", "checkpoint") + "'",
          "train: --resume without a checkpoint names the directory it looked in")
    before = open(os.path.join(straight, "metrics.csv")).read()
    fails([a.gradcomp, "train", cfg, "--out", os.path.join(tmp, "train")], "holds an earlier run; pass --overwrite",
          "train: an existing run directory is not overwritten")
    check(open(os.path.join(straight, "metrics.csv")).read() == before, "train: ... and its metrics are untouched")
    run([a.gradcomp, "train", cfg, "--out", os.path.join(tmp, "train"), "--overwrite", "--set", "steps=10",
         "--no-progress"])
    check(len(losses(straight)) == 10, "train: --overwrite replaces the earlier run")
    run([a.gradcomp, "train", cfg, "--out", os.path.join(tmp, "train"), "--overwrite", "--no-progress"])

    # The other commands range-check their options too (CLI11 reports them; never an abort or a hang).
    for args, text in ((["allreduce-perf", "--ranks", "100000"], "--ranks"), (["allreduce-perf", "-c", "7"], "--check"),
                       (["allreduce-perf", "--seed", "-1"], "--seed"), (["codecs", "--seed", "-1"], "--seed"),
                       (["model", "--encode-gbps", "-1"], "--encode-gbps"), (["model", "--overlap", "2"], "--overlap"),
                       (["codecs", "--cpu-path", "sse9"], "--cpu-path")):
        p = run([a.gradcomp] + args, timeout=60, expect_ok=False)
        check(p.returncode not in (0, 134) and text in p.stderr, f"{' '.join(args)}: refused naming {text}")

    # `gradcomp codecs` names the CPU kernel path it used; scalar is there on every CPU.
    table = run([a.gradcomp, "codecs", "--n", "4096", "--codec", "fp16", "--repeats", "1", "--cpu-path", "scalar"]).stdout
    check("CPU kernel path: scalar" in table, f"codecs: the path is named ({table[:300]})")
    rows = run([a.gradcomp, "codecs", "--n", "4096", "--codec", "bf16", "--repeats", "1", "--csv"]).stdout.splitlines()
    check(rows[0].endswith(",cpu_path") and rows[1].split(",")[-1] in ("avx512", "avx2", "scalar"), f"codecs csv: {rows}")

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
    # Another configuration: copy the sweep, change the steps; its runs are run again, not skipped.
    sdir2 = os.path.join(tmp, "sweep2")
    shutil.copytree(sdir, sdir2)
    third = run([a.gradcomp, "sweep", sweep_file, "--out", sdir2, "--set", "steps=12", "--no-progress"]).stdout
    check(third.count("running it again") == 2 and "done before" not in third,
          "sweep: runs stored from another configuration are run again")
    check(len(losses(os.path.join(sdir2, "runs", "ef,codec=sign"))) == 12, "sweep: ... with the new steps")
    fails([a.gradcomp, "sweep", sweep_file, "--out", sdir2, "--set", "steps=14", "--no-rerun", "--no-progress"],
          "was made from another configuration", "sweep: --no-rerun refuses to rerun them")
    bad_sweep = {"base": config, "cases": [{"name": "good", "codec": "none"}, {"name": "broken", "codec": "int9"}]}
    bad_file = os.path.join(tmp, "bad_sweep.json")
    json.dump(bad_sweep, open(bad_file, "w"))
    p = run([a.gradcomp, "sweep", bad_file, "--out", os.path.join(tmp, "bad_sweep"), "--no-progress"], expect_ok=False)
    check(p.returncode == 1 and "1 of 2 runs failed (their failed.json says why): broken" in p.stdout and
          os.path.exists(os.path.join(tmp, "bad_sweep", "runs", "good", "summary.json")),
          "sweep: a failed run exits 1 after the others finished, and is listed")
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
