"""examples/torch/train_gpt.py under torchrun (2 gloo ranks, a tiny model so it takes seconds): it
trains, a run resumed from its checkpoint ends bitwise where the uninterrupted one does, and bad options
are refused by name."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

EXAMPLE = REPO / "examples" / "torch" / "train_gpt.py"
TINY = ["--layers", "1", "--embd", "32", "--heads", "2", "--block", "32", "--batch", "8", "--eval-every", "3",
        "--no-progress", "--codec", "int8:rounding=stochastic", "--ef", "ef"]


def torchrun(*args, ranks=2, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(EXAMPLE),
           *map(str, args)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return p


def summary(p):
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_example_trains_and_resumes_bitwise(tmp_path):
    full = summary(torchrun(*TINY, "--steps", 6))
    # Untrained, the loss is about ln(vocabulary); six AdamW steps at 3e-3 must bring it down.
    assert full["evals"][0]["val_loss"] > full["final_val_loss"] and full["final_train_loss"] < 4.4
    assert full["world"] == 2 and full["bytes_per_step"] > 0
    torchrun(*TINY, "--steps", 3, "--checkpoint", tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.rank0.pt", "ck.rank1.pt"]
    resumed = summary(torchrun(*TINY, "--steps", 6, "--checkpoint", tmp_path / "ck", "--resume"))
    assert (resumed["final_val_loss"], resumed["final_train_loss"]) == (full["final_val_loss"],
                                                                        full["final_train_loss"])


@pytest.mark.parametrize("args,message", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--embd", "30", "--heads", "4"], "--embd must be a multiple of --heads"),
    (["--lr", "-1"], "--lr must be in (0, 10)"),
    (["--resume"], "--resume needs --checkpoint"),
    (["--bucket-cap-mb", "0"], "--bucket-cap-mb must be in (0, 1e5]"),
])
def test_bad_options_are_refused_by_name(args, message):
    # argparse refuses them before torch.distributed starts: one process is enough.
    p = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr


def test_a_wrong_codec_is_the_same_clear_error_on_every_rank():
    p = torchrun(*TINY, "--steps", 2, "--codec", "int9", check=False)
    assert p.returncode != 0 and p.stderr.count("unknown codec 'int9'") >= 2
