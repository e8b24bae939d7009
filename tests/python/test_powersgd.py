"""gradcomp's powersgd all-reduce against torch's powerSGD_hook math: on the same gradients and the same
initial Q, the outputs of every step agree within fp32 rounding (relative 1e-5), with warm start and error
feedback over several steps, at ranks 1, 2 and 4 (torch orthogonalizes with Gram-Schmidt at rank <= 2 and
QR above, which differs by column signs only: P Q^T does not change)."""

import numpy as np
import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

from gradcomp import _C


def torch_powersgd(grads, rows, rank, q0, epsilon, error_feedback):
    """torch's powerSGD_hook per step (one tensor, W ranks, no process group): the hook's own operations."""
    steps, world, n = grads.shape
    cols = n // rows
    r = min(rank, rows, cols)
    q = torch.from_numpy(q0.copy()).view(1, cols, r)
    errors = [torch.zeros(rows, cols) for _ in range(world)]
    outputs = []
    for s in range(steps):
        ms = [torch.from_numpy(grads[s, w]).view(rows, cols).clone() for w in range(world)]
        if error_feedback:
            for w in range(world):
                ms[w] += errors[w]
        _orthogonalize(q, epsilon)  # the first step: the random Q; later: the warm start
        p = sum(torch.bmm(m.unsqueeze(0), q) for m in ms)  # all_reduce(P)
        _orthogonalize(p, epsilon)
        q = sum(torch.bmm(m.unsqueeze(0).transpose(1, 2), p) for m in ms) / world  # all_reduce(Q).div_(W)
        approx = torch.bmm(p, q.transpose(1, 2))[0]  # the average the hook writes back
        if error_feedback:
            errors = [m - approx for m in ms]
        outputs.append(approx.reshape(-1).numpy().copy())
    return np.stack(outputs)


@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("error_feedback", [True, False])
def test_powersgd_matches_torch_powersgd_hook_math(rank, world, error_feedback):
    rows, cols, steps, seed = 48, 36, 4, 11
    rng = np.random.default_rng(rank * 10 + world)
    # A gradient with a few strong directions plus noise, as real layers have.
    basis = rng.standard_normal((rows, 3)) @ rng.standard_normal((3, cols))
    grads = (basis[None, None] + 0.3 * rng.standard_normal((steps, world, rows, cols))).astype(np.float32)
    grads = grads.reshape(steps, world, rows * cols)
    epsilon = 1e-8
    q0 = np.empty(cols * rank, dtype=np.float32)
    _C.powersgd_initial_q(seed, 0, cols, rank, q0)
    out = np.empty(steps * rows * cols, dtype=np.float32)
    _C.powersgd_steps(grads.reshape(-1), steps, world, rows, f"rank={rank},epsilon={epsilon}",
                      "ef" if error_feedback else "none", "none", seed, out)
    ours = out.reshape(steps, rows * cols) / world  # gradcomp sums; the hook averages
    want = torch_powersgd(grads, rows, rank, q0.reshape(cols, rank), epsilon, error_feedback)
    for s in range(steps):
        rel = np.linalg.norm(ours[s] - want[s]) / np.linalg.norm(want[s])
        assert rel < 1e-5, f"step {s}: relative difference {rel:.2e} from torch's powerSGD_hook"
    if not error_feedback and rank >= 4:
        # And the approximation is a real one: rank 4 holds the gradient's 3 strong directions, so it is
        # close to the mean gradient (the noise, 0.3 per value, is what it drops).
        mean = grads[-1].mean(axis=0)
        assert np.linalg.norm(ours[-1] - mean) / np.linalg.norm(mean) < 0.5


def test_powersgd_through_fp16_stays_close_to_fp32():
    rows, cols, steps, world = 64, 32, 3, 2
    grads = np.random.default_rng(3).standard_normal((steps, world, rows * cols)).astype(np.float32)
    outs = {}
    for codec in ("none", "fp16", "bf16"):
        out = np.empty(steps * rows * cols, dtype=np.float32)
        _C.powersgd_steps(grads.reshape(-1), steps, world, rows, "rank=2", "ef", codec, 5, out)
        outs[codec] = out
    for codec, bound in (("fp16", 2e-3), ("bf16", 2e-2)):
        rel = np.linalg.norm(outs[codec] - outs["none"]) / np.linalg.norm(outs["none"])
        assert rel < bound, f"{codec}: {rel:.2e}"
