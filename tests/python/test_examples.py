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
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}\nstdout:\n{p.stdout[-2000:]}")
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


def test_the_example_runs_fsdp_with_gradcomps_reduce_scatter_and_resumes_bitwise(tmp_path):
    # --fsdp: FSDP2 with compress_fsdp, here top-k 5 % with DGC (its 2-step warm-up sends a quarter of
    # each chunk, then the codec's 5 %); resumed from its checkpoint (model and optimizer shards, the
    # reduce-scatters' momentum and v) it ends where the uninterrupted run does, bit for bit. FSDP's own
    # reduce-scatter (--hook none) sends the fp32 gradient: (W - 1) / W of it.
    fsdp = [*TINY[:-4], "--fsdp", "--codec", "topk:ratio=0.05", "--ef", "dgc:momentum=0.9,warmup=2",
            "--optimizer", "sgd", "--momentum", "0", "--lr", "0.3", "--min-numel", "100"]
    full = summary(torchrun(*fsdp, "--steps", 6))
    assert full["fsdp"] and full["evals"][0]["val_loss"] > full["final_val_loss"]
    sent = full["bytes_sent"]
    # the warm-up's quarter at step 0; at step 1 its 1/64 is below the codec's 5 %, which it sends from then on
    assert sent[0] > 2 * sent[1] and sent[1:] == [sent[1]] * 5, sent
    torchrun(*fsdp, "--steps", 3, "--checkpoint", tmp_path / "ck")
    resumed = summary(torchrun(*fsdp, "--steps", 6, "--checkpoint", tmp_path / "ck", "--resume"))
    assert (resumed["final_val_loss"], resumed["final_train_loss"]) == (full["final_val_loss"],
                                                                        full["final_train_loss"])
    plain = summary(torchrun(*TINY[:-4], "--fsdp", "--hook", "none", "--steps", 2))
    assert plain["bytes_per_step"] == 4 * plain["params"] / 2 > 5 * sent[2]
    # --start-iter 2: two exact fp32 reduce-scatters (FSDP's own bytes), then DGC's warm-up from its start
    late = summary(torchrun(*fsdp, "--steps", 3, "--start-iter", 2))["bytes_sent"]
    assert late == [plain["bytes_per_step"]] * 2 + [sent[0]], (late, plain["bytes_per_step"], sent[0])
    # Rows that do not split evenly (33 wide): FSDP pads each parameter's last chunk, and both counts
    # include the padding, gradcomp's exact steps and FSDP's own.
    odd = ["--embd", "33", "--heads", "3", "--steps", 1]
    own = summary(torchrun(*TINY[:-4], "--fsdp", "--hook", "none", *odd))
    exact = summary(torchrun(*fsdp, *odd, "--start-iter", 1))
    assert exact["bytes_sent"] == own["bytes_sent"] and own["bytes_per_step"] > 4 * own["params"] / 2, (exact, own)


@pytest.mark.parametrize("args,message", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--embd", "30", "--heads", "4"], "--embd must be a multiple of --heads"),
    (["--lr", "-1"], "--lr must be in (0, 10)"),
    (["--resume"], "--resume needs --checkpoint"),
    (["--bucket-cap-mb", "0"], "--bucket-cap-mb must be in (0, 1e5]"),
    (["--fsdp", "--hook", "torch-fp16"], "--fsdp does not take --hook torch-fp16"),
    (["--fsdp", "--algorithm", "allgather"], "--fsdp does not take --algorithm"),
])
def test_bad_options_are_refused_by_name(args, message):
    # argparse refuses them before torch.distributed starts: one process is enough.
    p = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr


def test_a_wrong_codec_is_the_same_clear_error_on_every_rank():
    p = torchrun(*TINY, "--steps", 2, "--codec", "int9", check=False)
    assert p.returncode != 0 and p.stderr.count("unknown codec 'int9'") >= 2
