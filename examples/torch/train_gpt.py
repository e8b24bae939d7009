"""A character-level GPT trained data-parallel on Shakespeare's plays, with gradcomp's DDP hook.

    torchrun --nproc-per-node 4 examples/torch/train_gpt.py --codec int8 --ef ef
    torchrun --nproc-per-node 4 examples/torch/train_gpt.py --hook none          # DDP's own all-reduce
    torchrun --nproc-per-node 4 examples/torch/train_gpt.py --hook torch-fp16    # torch's fp16_compress_hook
    torchrun --nproc-per-node 4 examples/torch/train_gpt.py --fsdp --codec int8  # FSDP2, gradcomp's reduce-scatter

The text is the complete works as scripts/setup extracted them to data/shakespeare (the modern
edition, one file per work; nothing is downloaded). Runs on the CPU with gloo (NCCL on GPUs: --backend
nccl). Rank 0 shows a progress bar with the loss, the bytes this rank sent per step and the step time,
evaluates on held-out text every --eval-every steps, and prints one JSON summary line at the end.
--checkpoint saves model, optimizer, hook state and data position every --save-every steps; --resume
continues from it bitwise identically (the hook's residuals are keyed by parameter name).

--fsdp shards the model with FSDP2 (fully_shard on every block and on the whole model) instead of DDP;
--hook gradcomp then installs gradcomp's compressed reduce-scatter (compress_fsdp) and --hook none leaves
FSDP's own. The bytes per step are the gradients' reduce-scatter (FSDP's all-gathers of the parameters are
the same either way and not counted).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

REPO = pathlib.Path(__file__).resolve().parents[2]


# --- data ------------------------------------------------------------------------------------------------
def load_corpus(folder: pathlib.Path) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Train / validation character ids (the last 10 % of the concatenated works is validation)."""
    files = sorted(p for p in folder.glob("*_gut.txt"))
    if not files:
        raise SystemExit(f"train_gpt: no Shakespeare texts in {folder}; run ./scripts/setup first")
    text = "\n".join(p.read_text(encoding="utf-8", errors="strict") for p in files)
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.int16)
    cut = int(len(ids) * 0.9)
    return ids[:cut], ids[cut:], vocab


def batch(ids: torch.Tensor, size: int, block: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(ids) - block - 1, (size,), generator=generator)
    x = torch.stack([ids[s:s + block] for s in starts]).long()
    y = torch.stack([ids[s + 1:s + 1 + block] for s in starts]).long()
    return x, y


# --- model -----------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d: int, heads: int, block: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharGPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, block: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads, block) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


# --- the run ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hook", default="gradcomp", choices=["gradcomp", "none", "torch-fp16", "torch-powersgd"])
    p.add_argument("--fsdp", action="store_true", help="FSDP2 instead of DDP (with --hook gradcomp or none)")
    p.add_argument("--codec", default="int8", help="gradcomp codec spec (with --hook gradcomp)")
    p.add_argument("--ef", default="ef", help="gradcomp error feedback: ef, none, ef:scale=auto, ef21, "
                   "ef21-sgdm[:eta=0.1], dgc[:momentum=0.9,clip=0,warmup=0] (with dgc, train with --optimizer sgd "
                   "--momentum 0: the momentum is in what is sent)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"],
                   help="adamw (weight decay 0.01, betas 0.9 / 0.99) or sgd (with --momentum)")
    p.add_argument("--momentum", type=float, default=0.9, help="sgd's momentum, in [0, 1)")
    p.add_argument("--algorithm", default="auto", help="gradcomp algorithm: auto reduce-scatter allgather randomk")
    p.add_argument("--min-numel", type=int, default=1024, help="smaller parameters go uncompressed")
    p.add_argument("--start-iter", type=int, default=0, help="exact all-reduces before this step")
    p.add_argument("--powersgd-rank", type=int, default=1, help="torch-powersgd: matrix approximation rank")
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="DDP bucket size (default: DDP's, 1 MB first bucket then 25 MB); given, every bucket")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--block", type=int, default=64, help="context length")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--checkpoint", type=pathlib.Path, help="checkpoint file (written every --save-every steps)")
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--data", type=pathlib.Path, default=REPO / "data" / "shakespeare")
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--summary", type=pathlib.Path, help="also write the JSON summary to this file")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    for name in ("steps", "batch", "block", "layers", "embd", "heads", "eval_every", "eval_batches", "save_every",
                 "powersgd_rank"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.embd % a.heads:
        p.error("--embd must be a multiple of --heads")
    if not (0 < a.lr < 10):
        p.error("--lr must be in (0, 10)")
    if not (0 <= a.momentum < 1):
        p.error("--momentum must be in [0, 1)")
    try:  # the hook's own parser, so that a bad spec is a usage error here and not a failure on every rank
        from gradcomp.torch._policy import parse_error_feedback
        a.ef = parse_error_feedback(a.ef).spec
    except ValueError as e:  # gradcomp.InvalidArgument
        p.error(f"--ef: {e}")
    if a.bucket_cap_mb is not None and not (0 < a.bucket_cap_mb <= 1e5):
        p.error("--bucket-cap-mb must be in (0, 1e5]")
    if a.resume and not a.checkpoint:
        p.error("--resume needs --checkpoint")
    if a.fsdp:  # FSDP's reduce-scatter has no buckets and one algorithm
        for bad, given in (("--hook torch-fp16 / torch-powersgd", a.hook.startswith("torch-")),
                           ("--bucket-cap-mb", a.bucket_cap_mb is not None),
                           ("--algorithm", a.algorithm != "auto")):
            if given:
                p.error(f"--fsdp does not take {bad}")
    return a


def register_hook(ddp, args, group):
    """The communication hook the run compares; returns the gradcomp state (or None)."""
    if args.hook == "gradcomp":
        import gradcomp.torch as gt

        state = gt.DDPState(ddp, codec=args.codec, error_feedback=args.ef, algorithm=args.algorithm,
                            min_numel=args.min_numel, start_iter=args.start_iter, seed=args.seed)
        ddp.register_comm_hook(state, gt.ddp_hook)
        return state
    if args.hook == "torch-fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif args.hook == "torch-powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

        state = ps.PowerSGDState(process_group=group, matrix_approximation_rank=args.powersgd_rank,
                                 start_powerSGD_iter=2, use_error_feedback=True, warm_start=True,
                                 random_seed=args.seed)
        ddp.register_comm_hook(state, ps.powerSGD_hook)
        return state
    return None


def shard_with_fsdp(model: nn.Module, args):
    """FSDP2 on every block and on the whole model; with --hook gradcomp, gradcomp's reduce-scatter on
    each of them (returned by module name: the state to checkpoint), else FSDP's own (None)."""
    from torch.distributed.fsdp import fully_shard

    for blk in model.blocks:
        fully_shard(blk)
    fully_shard(model)
    if args.hook != "gradcomp":
        return None
    import gradcomp.torch as gt

    return gt.compress_fsdp(model, codec=args.codec, error_feedback=args.ef, min_numel=args.min_numel,
                            start_iter=args.start_iter, seed=args.seed)


class FsdpState:
    """compress_fsdp's reduce-scatters as one state (the bytes of a step, one checkpoint entry)."""

    def __init__(self, comms: dict):
        self.comms = comms

    @property
    def last_stats(self) -> dict:
        return {"bytes_sent": sum(rs.last_stats.get("bytes_sent", 0) for rs in self.comms.values())}

    def state_dict(self) -> dict:
        return {name: rs.state_dict() for name, rs in self.comms.items()}

    def load_state_dict(self, sd: dict) -> None:
        for name, rs in self.comms.items():
            rs.load_state_dict(sd[name])

    def close(self) -> None:
        pass


def bytes_per_step(args, state, n_params: int, world: int, step: int, powersgd_elements: int) -> float:
    """Bytes this rank sent in the last step: gradcomp counts its own; the others, from their formats
    on a ring all-reduce (2 (W-1)/W of the payload; PowerSGD: its P and Q factors) or FSDP's ring
    reduce-scatter ((W-1)/W of the fp32 gradient, n_params then counting FSDP's padding)."""
    ring = 2 * (world - 1) / world
    if args.hook == "gradcomp":
        return float(state.last_stats.get("bytes_sent", 0))
    if args.fsdp:
        return ring / 2 * 4 * n_params
    if args.hook == "torch-fp16":
        return ring * 2 * n_params
    if args.hook == "torch-powersgd" and step >= 2:  # start_powerSGD_iter: plain all-reduces before it
        return ring * 4 * powersgd_elements
    return ring * 4 * n_params


def powersgd_payload_elements(model: nn.Module, rank: int, min_compression_rate: float = 2.0) -> int:
    """Elements PowerSGD all-reduces per step: r (n + m) per compressed matrix, the rest uncompressed
    (its _should_compress rule)."""
    total = 0
    for p in model.parameters():
        if p.dim() < 2:
            total += p.numel()
            continue
        n, m = p.shape[0], p.numel() // p.shape[0]
        compressed = min(rank, n, m) * (n + m)  # the hook caps the rank at the matrix's sides
        total += compressed if min_compression_rate * compressed < p.numel() else p.numel()
    return total


def checkpoint_file(prefix: pathlib.Path, rank: int) -> pathlib.Path:
    # One file per rank: the model and optimizer are the same everywhere, but each rank's error-feedback
    # residuals are its own.
    return prefix.with_name(f"{prefix.name}.rank{rank}.pt")


def save_checkpoint(prefix: pathlib.Path, rank: int, model, opt, state, step: int) -> None:
    path = checkpoint_file(prefix, rank)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "hook": state.state_dict() if state is not None else None}, tmp)
    os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint intact
    dist.barrier()


def load_checkpoint(prefix: pathlib.Path, rank: int) -> dict:
    path = checkpoint_file(prefix, rank)
    if not path.exists():
        raise SystemExit(f"train_gpt: --resume: no checkpoint at {path}")
    return torch.load(path, weights_only=False)


@torch.no_grad()
def evaluate(model, val: torch.Tensor, args) -> float:
    g = torch.Generator().manual_seed(12345)  # the same held-out batches for every run
    losses = []
    for _ in range(args.eval_batches):
        x, y = batch(val, 32, args.block, g)
        logits = model(x)
        losses.append(float(F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))))
    return sum(losses) / len(losses)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group(args.backend, timeout=datetime.timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    train_ids, val_ids, vocab = load_corpus(args.data)
    torch.manual_seed(args.seed)
    model = CharGPT(len(vocab), args.embd, args.heads, args.layers, args.block)
    n_params = sum(p.numel() for p in model.parameters())
    # FSDP2 cuts each parameter along dim 0 into world-size chunks of equal rows, padding the last: its
    # reduce-scatter moves the padded size (as gradcomp's counts its padded chunks).
    padded = sum(-(-p.shape[0] // world) * world * (p.numel() // p.shape[0]) for p in model.parameters())
    comms = ck = logits = loss = None  # released before the process group (the end of main)
    if args.fsdp:
        comms = shard_with_fsdp(model, args)
        ddp, state = model, FsdpState(comms) if comms is not None else None
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model, **({} if args.bucket_cap_mb is None else
                                                                   {"bucket_cap_mb": args.bucket_cap_mb}))
        state = register_hook(ddp, args, group)
    powersgd_elements = powersgd_payload_elements(model, args.powersgd_rank)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.99)) \
        if args.optimizer == "adamw" else torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    start = 0
    if args.resume:
        ck = load_checkpoint(args.checkpoint, rank)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        if args.hook == "gradcomp":
            state.load_state_dict(ck["hook"])
        start = ck["step"]
    show = rank == 0 and not args.no_progress
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=args.steps, initial=start, unit="step", file=sys.stderr, dynamic_ncols=True)
    step_times, sent, val_loss, evals, losses = [], [], float("nan"), [], []
    for step in range(start, args.steps):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
        x, y = batch(train_ids, args.batch, args.block, g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = ddp(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        opt.step()
        step_times.append(time.perf_counter() - t0)
        sent.append(bytes_per_step(args, state, padded if args.fsdp else n_params, world, step, powersgd_elements))
        loss_value = float(loss.detach())
        losses.append(loss_value)
        if not math.isfinite(loss_value):
            raise SystemExit(f"train_gpt: the loss is {loss_value} at step {step}")
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            val_loss = evaluate(model, val_ids, args)
            evals.append({"step": step + 1, "val_loss": val_loss})
        if bar is not None:
            bar.set_postfix(loss=f"{loss_value:.3f}", val=f"{val_loss:.3f}", kB_per_step=f"{sent[-1] / 1e3:.0f}",
                            step_ms=f"{1e3 * step_times[-1]:.0f}")
            bar.update(1)
        if args.checkpoint and ((step + 1) % args.save_every == 0 or step + 1 == args.steps):
            save_checkpoint(args.checkpoint, rank, model, opt, state if args.hook == "gradcomp" else None, step + 1)
    if bar is not None:
        bar.close()
    steady = sorted(step_times[min(5, len(step_times) - 1):])  # the first steps include the bucket rebuild
    summary = {"hook": args.hook, "fsdp": args.fsdp, "codec": args.codec if args.hook == "gradcomp" else None,
               "ef": args.ef if args.hook == "gradcomp" else None, "world": world, "params": n_params,
               "steps": args.steps, "final_val_loss": val_loss, "evals": evals,
               "median_step_seconds": steady[len(steady) // 2] if steady else float("nan"),
               "bytes_per_step": sum(sent) / max(len(sent), 1), "final_train_loss": loss_value,
               # Per step (rank 0's loss, this rank's bytes and wall time), for curves: the paper
               # reproductions plot them and model each step's time on slower links.
               "train_losses": losses, "bytes_sent": sent, "step_seconds": step_times}
    if rank == 0:
        print(json.dumps(summary))
        if args.summary:
            args.summary.write_text(json.dumps(summary) + "\n")
    if args.hook == "gradcomp":
        state.close()
    # The model, its optimizer and the reduce-scatters go before the process group, by the collector:
    # DDP sits in a reference cycle (its reducer's hooks; FSDP's modules and a reduce-scatter holding its
    # module too), and alive at interpreter exit its teardown races gloo's threads and aborts the process
    # now and then ("terminate called without an active exception": plain DDP, no hook, in 2 of 20
    # rank-runs of a small script; 0 of 20 once it was collected first). Every rank is done with the
    # group before it is destroyed.
    del ddp, model, opt, state, comms, ck, logits, loss  # the reduce-scatters hold the model; the loss its graph
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
