"""One rank of a data-parallel MNIST-1D run: torch DDP over gloo with gradcomp's communication hook, as a
PyTorch user trains. The reproductions start it under torchrun:

    python -m torch.distributed.run --standalone --nproc-per-node W -m gradcomp.reproduce.mnist1d_ddp \\
        REQUEST.json RECORD.json DATA_DIR

REQUEST: model, hook ("gradcomp" or "none": DDP's own all-reduce), codec, ef, min_numel, optimizer
("sgd:lr=,momentum=" or "adam:lr="), steps, batch_size (per rank), eval_every, seed. Each rank draws its
batches from its own 1/W of the training set (an iid split); rank 0 evaluates on the test set and writes
RECORD (the record mnist1d_models.train returns, plus per-step bytes and wall time). A run that diverges keeps going
(every rank takes the same steps, so none waits for a peer that stopped) unless gradcomp's hook refuses
the non-finite gradient, which it does on every rank at once; either way the record says where.
"""

from __future__ import annotations

import datetime
import gc
import json
import math
import os
import sys
import time


def _optimizer(spec: str, params):
    import torch
    name, _, args = spec.partition(":")
    kw = dict(item.split("=") for item in args.split(",") if item)
    if name == "sgd":
        return torch.optim.SGD(params, lr=float(kw.get("lr", 0.1)), momentum=float(kw.get("momentum", 0.0)))
    if name == "adam":
        return torch.optim.Adam(params, lr=float(kw.get("lr", 1e-3)))
    raise ValueError(f"mnist1d_ddp: unknown optimizer {spec!r} (sgd:lr=,momentum= or adam:lr=)")


def main(argv) -> int:
    import torch
    import torch.distributed as dist
    from .mnist1d_models import load_mnist1d, make_model

    request_path, record_path, data_dir = argv
    with open(request_path) as f:
        request = json.load(f)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=2))
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y, xt, yt = (torch.from_numpy(a) for a in load_mnist1d(data_dir))
    shard = torch.arange(rank, x.shape[0], world)   # an iid split: every W-th sample
    seed = int(request["seed"])
    torch.manual_seed(seed)
    model = make_model(request["model"])
    n_params = sum(p.numel() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = None
    if request["hook"] == "gradcomp":
        import gradcomp.torch as gt
        state = gt.DDPState(ddp, codec=request["codec"], error_feedback=request.get("ef", "ef"),
                            min_numel=int(request.get("min_numel", 1024)), seed=seed)
        ddp.register_comm_hook(state, gt.ddp_hook)
    opt = _optimizer(request["optimizer"], ddp.parameters())
    order = torch.Generator().manual_seed(seed * 1000 + rank)
    steps, batch, every = int(request["steps"]), int(request["batch_size"]), int(request["eval_every"])
    record = {"steps": [], "loss": [], "evaluations": [], "bytes_sent": [], "step_seconds": [],
              "planned_steps": steps, "status": "ok", "world": world}
    fp32_ring = 2 * (world - 1) / world * 4 * n_params
    import gradcomp
    loss = None
    for step in range(steps):
        idx = shard[torch.randint(0, shard.numel(), (batch,), generator=order)]
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        try:
            loss.backward()
        except (gradcomp.NonFiniteError, RuntimeError) as e:   # the hook's error arrives through DDP
            if "non-finite" not in str(e) and not isinstance(e, gradcomp.NonFiniteError):
                raise
            record.update(status="diverged", error=f"non-finite gradient at step {step}")
            break
        opt.step()
        record["step_seconds"].append(time.perf_counter() - t0)   # modelled wall time (metrics.py)
        value = loss.item()
        record["steps"].append(step)
        record["loss"].append(value)
        record["bytes_sent"].append(float(state.last_stats.get("bytes_sent", 0)) if state else fp32_ring)
        if not math.isfinite(value) and record["status"] == "ok":
            record.update(status="diverged", error=f"loss {value} at step {step}")
        if rank == 0 and ((step + 1) % every == 0 or step + 1 == steps):
            with torch.no_grad():
                acc = float((model(xt).argmax(1) == yt).float().mean())
            record["evaluations"].append((step, acc))
    if state is not None and record["status"] == "ok":
        state.close()
    if rank == 0:
        with open(record_path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(record_path + ".tmp", record_path)
    # DDP sits in a reference cycle (its reducer's hooks): alive at interpreter exit, its teardown races
    # gloo's threads and aborts the process now and then ("terminate called without an active
    # exception", about one rank in ten here, with or without a hook). It goes first, by the collector.
    del ddp, model, opt, state, loss
    gc.collect()
    if record["status"] == "ok":
        dist.barrier()   # rank 0 evaluates and writes last: the others must not tear the group down first
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
