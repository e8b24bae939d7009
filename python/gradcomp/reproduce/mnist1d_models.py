"""MNIST-1D (Greydanus 2020) and the paper's three baseline models, in PyTorch, for the reproductions.

The data set is generated procedurally by the pinned `mnist1d` package (make_dataset with its default
arguments: 5000 sequences of length 40, the first 4000 for training), cached as data/mnist1d.npz; nothing
is downloaded. Training follows the paper's setup: Adam, lr 1e-2, batch 100, cross-entropy, one thread
(torch's results then depend only on the seed).
"""

from __future__ import annotations

import math
import os


def load_mnist1d(data_dir: str):
    """(x_train, y_train, x_test, y_test) as numpy arrays; generated once and cached."""
    import numpy as np
    path = os.path.join(data_dir, "mnist1d.npz")
    if not os.path.exists(path):
        os.environ.setdefault("MPLBACKEND", "Agg")  # mnist1d imports pyplot
        from mnist1d.data import get_dataset_args, make_dataset
        d = make_dataset(get_dataset_args())
        os.makedirs(data_dir, exist_ok=True)
        tmp = path + ".tmp.npz"
        np.savez(tmp, x=d["x"].astype(np.float32), y=d["y"].astype(np.int64),
                 x_test=d["x_test"].astype(np.float32), y_test=d["y_test"].astype(np.int64))
        os.replace(tmp, path)
    with np.load(path) as z:
        return z["x"], z["y"], z["x_test"], z["y_test"]


def make_model(name: str):
    import torch.nn as nn
    if name == "logistic":
        return nn.Linear(40, 10)
    if name == "mlp":
        return nn.Sequential(nn.Linear(40, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 10))
    if name == "cnn":
        # 40 -> 19 -> 10 -> 5 positions of 25 channels, then a linear classifier.
        return nn.Sequential(nn.Unflatten(1, (1, 40)),
                             nn.Conv1d(1, 25, 5, stride=2, padding=1), nn.ReLU(),
                             nn.Conv1d(25, 25, 3, stride=2, padding=1), nn.ReLU(),
                             nn.Conv1d(25, 25, 3, stride=2, padding=1), nn.ReLU(),
                             nn.Flatten(), nn.Linear(125, 10))
    raise ValueError(f"unknown MNIST-1D model {name!r} (logistic, mlp, cnn)")


def train(request: dict, data_dir: str) -> dict:
    """One training run; returns its record: per-step loss, (step, test accuracy) evaluations, status."""
    import torch
    torch.set_num_threads(1)
    x, y, xt, yt = (torch.from_numpy(a) for a in load_mnist1d(data_dir))
    steps, batch, every = int(request["steps"]), int(request["batch_size"]), int(request["eval_every"])
    torch.manual_seed(int(request["seed"]))
    model = make_model(request["model"])
    opt = torch.optim.Adam(model.parameters(), lr=float(request["lr"]))
    order = torch.Generator().manual_seed(int(request["seed"]))
    record = {"steps": [], "loss": [], "evaluations": [], "planned_steps": steps, "status": "ok"}
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=order)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        record["steps"].append(step)
        record["loss"].append(value)
        if not math.isfinite(value):
            record.update(status="diverged", error=f"loss {value} at step {step}")
            break
        if (step + 1) % every == 0 or step + 1 == steps:
            with torch.no_grad():
                acc = float((model(xt).argmax(1) == yt).float().mean())
            record["evaluations"].append((step, acc))
    return record
