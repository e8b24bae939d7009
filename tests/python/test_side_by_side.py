"""benchmarks/side_by_side.py: its table has a row per operation with every tool's ratio, and bad options
are refused by name (the speed itself is a benchmark, never asserted here)."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "side_by_side.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_a_small_run_prints_the_table_and_names_the_cpu_path():
    p = run("--n", "65536", "--rounds", "1", "--processes", "1", "--threads", "1", "--no-compile",
            "--rows", "fp16 encode,sign decode")
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    assert "gradcomp's kernel path: " in out
    rows = [l for l in out.splitlines() if l.startswith("| fp16 encode |") or l.startswith("| sign decode |")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        assert cells[2] == "–"                      # torch.compile left out
        assert float(cells[1]) > 0 and float(cells[3]) > 0
    assert "| 1024 |" in out and "| 65536 |" in out  # the small-tensor table


def test_bad_options_are_refused_by_name():
    for args, text in ((["--n", "1000"], "--n"), (["--rounds", "0"], "--rounds"), (["--processes", "0"], "--processes"),
                       (["--rows", "nothing-like-this"], "matches no row")):
        p = run(*args)
        assert p.returncode == 2 and text in p.stderr, (args, p.stderr[-500:])
