"""A compressed reduce-scatter for FSDP2 (FSDPModule.set_custom_reduce_scatter, torch >= 2.9).

    import gradcomp.torch as gt
    gt.compress_fsdp(model, codec="int8", error_feedback="ef")   # every FSDPModule in the model

error_feedback: any of the DDP hook's (ddp.py): "ef", "none", "ef:scale=auto", "ef21", "ef21-sgdm:eta=0.1"
or "dgc:momentum=0.9,clip=0,warmup=0" (_policy.py has their steps, shared with the hook). The steps before
start_iter, and every step of a world of one rank, are exact fp32 reduce-scatters (as the hook's exact
all-reduces): no state moves, and dgc's warm-up counts from start_iter.

Before its first exchange on a group, and again after load_state_dict, every rank checks that all ranks
run the same configuration, step and input (_agreement.py): the all_to_all's message size follows from
them, and gloo aborts the process on a size mismatch rather than raising. The steps between are not
checked again (FSDP hands every rank the same input at every step), and load_state_dict must be called on
every rank (the next step's check is a collective). The exact steps do not look for NaN/Inf (nothing of
theirs is kept: the mean carries it, as FSDP's own reduce-scatter would).

FSDP hands the reduce-scatter one flat buffer: every parameter's gradient cut into world-size chunks
along dim 0, chunk r of every parameter back to back for rank r. Each rank encodes the chunk of every
destination (error feedback at the source), an all_to_all_single delivers them, and each rank decodes and
sums its chunk in fp32 and divides by the group's size. gradcomp owns the scaling: compress_fsdp sets
FSDP's gradient divide factor to 1 (HSDP: the number of replicas, which FSDP divides by around its
all-reduce across them) and forces sum reductions, so FSDP divides by nothing else.
Residuals are kept per module and converted to {parameter name: residual} for checkpoints.

Where each policy's state lives, and what it costs in memory (n: the module's unsharded gradient):
  ef, ef:scale=auto  the residual, n per rank (error feedback at the source: every rank compresses every
                     destination's chunk of its own gradient);
  ef21               -h in the residual (n per rank) and the shared estimate H of this rank's shard only
                     (n / W): each rank returns H + the mean of what the ranks sent for its chunk, and
                     keeps that as its H;
  ef21-sgdm          ef21 on v' = (1 - eta) v + eta g, v of n per rank;
  dgc                v in the residual and the momentum u, n each per rank; a parameter's gradient is
                     clipped over all of its chunks (as the hook clips it whole; a module whose parameters
                     FSDP does not expose is one anonymous parameter, clipped as one), and the warm-up's
                     larger k applies to each chunk (counted from start_iter).
Each of these states is double-buffered (a failed step changes nothing), and dgc and ef21-sgdm work on a
copy of an fp32 input: transient buffers of n each.
FSDP's input buffer is not changed: a policy that sends a momentum works on a copy of it.
"""

from __future__ import annotations

import datetime
import warnings
from typing import Optional

import torch
import torch.distributed as dist

from .. import _C
from .._codec import Codec
from ._agreement import check_ranks_agree
from ._exchange import (STATUS_OK, Exchange, ExchangeStats, Part, _align16, check_reduced_dtypes, raise_status,
                        warn_if_not_contractive, widened)
from ._layout import Layout, Piece, ResidualStore
from ._policy import (check_policy_fits, dgc_masking, dgc_momentum, ef21_add_shared_estimate, ef21_estimates_after,
                      ef21_sgdm_momentum, parse_error_feedback)


def _fsdp_layout(module: torch.nn.Module, numel: int, world: int, fqn: str) -> Layout:
    """Pieces of FSDP's reduce-scatter input: chunk r of parameter i sits at r * chunk + offset_i.

    Read from the module's FSDP parameters (private attributes, feature-detected); when they are not
    there or do not add up to the buffer, the buffer is one anonymous piece keyed by the module."""
    chunk = numel // world
    try:
        fsdp_params = module._get_fsdp_state()._fsdp_param_group.fsdp_params  # noqa: SLF001
        sizes = [(fp._param_fqn, fp.padded_sharded_param_size.numel(), fp._orig_size.numel()) for fp in fsdp_params]
    except AttributeError:
        sizes = []
    pieces: list[Piece] = []
    if sizes and sum(s for _, s, _ in sizes) == chunk:
        for r in range(world):
            at = r * chunk
            for name, shard, full in sizes:
                first = r * shard
                n = max(0, min(shard, full - first))  # the padding past the parameter's end belongs to none
                if n:
                    pieces.append(Piece(name, first, at, n, full))
                at += shard
    else:
        pieces.extend(Piece(f"{fqn}#flat{numel}", r * chunk, r * chunk, chunk, numel) for r in range(world))
    return Layout(pieces, numel)


def _shard_layout(layout: Layout, rank: int, chunk: int) -> Layout:
    """The pieces of rank's chunk of a reduce-scatter input, in the coordinates of its output shard."""
    first, end = rank * chunk, (rank + 1) * chunk
    return Layout([Piece(p.name, p.name_offset, p.offset - first, p.numel, p.full_numel)
                   for p in layout.pieces if first <= p.offset < end], chunk)


class CompressedReduceScatter:
    """FSDP2's ReduceScatter interface (allocate + __call__), compressed with a gradcomp codec."""

    def __init__(self, module: torch.nn.Module, *, codec: str = "int8", error_feedback: str = "ef", seed: int = 0,
                 nonfinite: str = "error", timeout: datetime.timedelta = datetime.timedelta(minutes=5),
                 threads: int = 1, min_numel: int = 0, start_iter: int = 0, fqn: str = ""):
        self._parsed = parse_error_feedback(error_feedback, "CompressedReduceScatter")
        check_policy_fits(self._parsed, Codec(codec).canonical_spec, nonfinite, "CompressedReduceScatter")
        if nonfinite not in ("error", "skip"):
            raise _C.InvalidArgument(f"CompressedReduceScatter: nonfinite must be 'error' or 'skip', got {nonfinite!r}")
        self.module = module
        self.fqn = fqn
        self.codec = Codec(codec)
        if not isinstance(min_numel, int) or min_numel < 0:
            raise _C.InvalidArgument(f"CompressedReduceScatter: min_numel must be an integer >= 0, got {min_numel!r}")
        self.min_numel = min_numel  # parameters with fewer elements are reduced exactly (fp32)
        if not isinstance(start_iter, int) or start_iter < 0:
            raise _C.InvalidArgument(f"CompressedReduceScatter: start_iter must be an integer >= 0, got {start_iter!r}")
        self.start_iter = start_iter  # steps before it are exact fp32 reduce-scatters
        self.error_feedback = self._parsed.spec
        self.seed = seed
        self.nonfinite = nonfinite
        self.timeout = timeout
        self.threads = threads
        self.residuals = ResidualStore()  # ef's e, dgc's v; ef21's -h (this rank's, of the whole input)
        self.momentum = ResidualStore()   # ef21-sgdm's v, dgc's u (this rank's, of the whole input)
        self.shared = ResidualStore()     # ef21's H (of this rank's shard)
        self.step = 0
        self.last_stats: dict = {}
        self._exchange: Optional[Exchange] = None
        self._checked_group: Optional[dist.ProcessGroup] = None  # the group the ranks last agreed on
        self._warned_not_contractive = False
        self._warned_exact_momentum = False

    def config(self) -> dict:
        """What every rank must share (checked before the first exchange; compared at load_state_dict)."""
        return {"codec": self.codec.canonical_spec, "error_feedback": self.error_feedback, "seed": self.seed,
                "nonfinite": self.nonfinite, "min_numel": self.min_numel, "start_iter": self.start_iter}

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op=None, async_op: bool = False):
        if self._exchange is None or self._exchange.group is not group:
            self._exchange = Exchange(self.codec, group, self.timeout, self.seed, self.nonfinite == "skip",
                                      self.threads, self.error_feedback == "ef:scale=auto")
        ex = self._exchange
        policy = self._parsed
        W = ex.world
        x = widened(input_tensor)
        n = x.numel()
        chunk = n // W
        layout = _fsdp_layout(self.module, n, W, self.fqn)
        if self._checked_group is not group:
            # Every rank reaches this with the same step (FSDP's order), so no rank can wait alone; a rank
            # whose input alone cannot be split would otherwise leave the others here until the deadline.
            check_ranks_agree({**self.config(), "step": self.step, "input_numel": n, "layout": layout.hash32,
                               "input_dtype": str(input_tensor.dtype)}, group, self.timeout,
                              "gradcomp FSDP reduce-scatter", x.device)
            self._checked_group = group
        if n % W:
            raise _C.InvalidArgument(f"CompressedReduceScatter: input of {n} elements does not split into {W} chunks")
        check_reduced_dtypes([("the gradient", input_tensor.dtype)], "CompressedReduceScatter")
        if self.step < self.start_iter or W == 1:
            self._exact(output_tensor, x, group, ex, chunk)
            return None
        ex.name_at = layout.name_at
        # ef21's h is refused rather than reset on one rank (its H would keep the old h for good)
        ex.resettable = not policy.shares_estimate
        # DGC's warm-up counts from compression's start
        ex.warmup = (self.step - self.start_iter, policy.warmup) if policy.name == "dgc" else (0, 0)
        stats = ExchangeStats()
        # One wire per (parameter, chunk); destination r gets every parameter's chunk r.
        parts = [Part(*part) for part in layout.parts(self.min_numel)]
        ef = policy.name != "none"
        momentum = ef and policy.has_momentum and any(not p.lossless for p in parts)
        if momentum:
            if x is input_tensor:
                x = x.clone()  # FSDP's buffer is not ours to change
            u, u_new = self.momentum.current(layout, x.device), self.momentum.scratch(layout)
            u_new.copy_(u)  # kept only once the step has succeeded
            if policy.name == "ef21-sgdm":
                ef21_sgdm_momentum(policy, parts, x, u, u_new)
            else:
                dgc_momentum(policy, parts, [p.name for p in layout.pieces], x, u, u_new, stats,
                             "gradcomp FSDP reduce-scatter", ex.rank)
        rin = self.residuals.current(layout, x.device) if ef else None
        rout = self.residuals.scratch(layout) if ef else None
        if ef:
            rout.copy_(rin)  # padding elements are never encoded; their (zero) residual carries over
        per_dest: list[list[Part]] = [[] for _ in range(W)]
        for part in parts:
            per_dest[min(part.start // chunk, W - 1)].append(part)
        if policy.name in ("ef", "ef21", "ef21-sgdm") and not self._warned_not_contractive:
            self._warned_not_contractive = True  # its layout is the module's, the same every step
            warn_if_not_contractive(self.codec, parts, "gradcomp FSDP reduce-scatter", policy.name)
        slot = _align16(max(ex.room(dest) for dest in per_dest))
        send = torch.empty(W * slot, dtype=torch.uint8, device=x.device)
        slots = send.view(W, slot)
        for r in range(W):
            status, used = ex.encode_parts(x, per_dest[r], slots[r], rin, rout, self.step, stats)
            ex.write_header(slots[r], status, self.step, layout.hash32,
                             used if status.code == STATUS_OK else status.value)
        recv = torch.empty_like(send)
        ex.wait_for(dist.all_to_all_single(recv, send, group=group, async_op=True), "FSDP reduce-scatter", stats)
        stats.bytes_sent += (W - 1) * slot
        recv_slots = recv.view(W, slot)
        headers = ex.read_headers(recv_slots)
        status = ex.check_headers(headers, self.step, layout.hash32, slot)
        # Every rank must learn of a problem any rank saw: one all-gather of the statuses.
        flags = torch.tensor([status.code, status.origin, status.value], dtype=torch.int64, device=x.device)
        everyone = torch.empty(3 * W, dtype=torch.int64, device=x.device)
        ex.wait_for(dist.all_gather_into_tensor(everyone, flags, group=group, async_op=True), "FSDP status", stats)
        for code, origin, value in everyone.view(W, 3).tolist():
            if code != STATUS_OK:
                raise_status(type(status)(code, origin, value), "FSDP reduce-scatter", layout.name_at, self.step,
                             layout.hash32)
        # My chunk's parts, in the local coordinates of the output shard.
        me = ex.rank
        local = [p._replace(start=p.start - me * chunk, end=p.end - me * chunk) for p in per_dest[me]]
        acc = output_tensor if output_tensor.dtype == torch.float32 else torch.empty(chunk, dtype=torch.float32,
                                                                                      device=x.device)
        padded = sum(p.end - p.start for p in local) != chunk
        if padded:
            acc.zero_()  # FSDP's padding rows belong to no parameter and stay zero
        for r in range(W):
            ex.decode_parts(recv_slots[r], int(headers[r]["value"]), acc, local, r > 0 or padded, stats, r)
        acc.div_(W)
        if ef and policy.shares_estimate:
            # x is still what this rank sent (the exchange wrote only acc): its estimate h moves by D(wire).
            # acc is the mean of what the ranks sent for this chunk: H' = H + mean is both the gradient
            # returned and the estimate kept. Exact parts stay exact.
            ef21_estimates_after(parts, rout, x)
            ef21_add_shared_estimate(self.shared, _shard_layout(layout, me, chunk), local, acc)
        if momentum and policy.name == "dgc":
            dgc_masking(parts, rin, rout, u_new, stats)
        if momentum:
            self.momentum.commit(layout)
        if acc is not output_tensor:
            output_tensor.copy_(acc)
        if ef:
            self.residuals.commit(layout)
        self.step += 1
        self.last_stats = {"step": self.step - 1, "bytes_sent": stats.bytes_sent,
                           "fp32_reduce_scatter_bytes": (W - 1) * chunk * 4,
                           "codec_seconds": stats.codec_seconds, "comm_seconds": stats.comm_seconds,
                           "resets": stats.resets}
        return None

    def _exact(self, output_tensor: torch.Tensor, x: torch.Tensor, group: dist.ProcessGroup, ex: Exchange,
               chunk: int) -> None:
        """An exact fp32 reduce-scatter and mean: the steps before start_iter, and a world of one rank."""
        if self._parsed.has_momentum and not self._warned_exact_momentum:
            warnings.warn(f"gradcomp FSDP reduce-scatter: {self.error_feedback}'s momentum is part of what it sends, "
                          f"and {'a world of one rank' if ex.world == 1 else f'the steps before start_iter={self.start_iter}'}"
                          " reduce exactly, without it: those steps take no momentum unless the optimizer has its own",
                          stacklevel=3)
            self._warned_exact_momentum = True
        stats = ExchangeStats()
        acc = output_tensor if output_tensor.dtype == torch.float32 else torch.empty(chunk, dtype=torch.float32,
                                                                                      device=x.device)
        if ex.world == 1:
            acc.copy_(x)
        else:
            ex.wait_for(dist.reduce_scatter_tensor(acc, x, group=group, async_op=True),
                        "FSDP reduce-scatter (exact)", stats)
            acc.div_(ex.world)
        if acc is not output_tensor:
            output_tensor.copy_(acc)
        self.step += 1
        fp32_bytes = (ex.world - 1) * chunk * 4
        self.last_stats = {"step": self.step - 1, "bytes_sent": fp32_bytes, "fp32_reduce_scatter_bytes": fp32_bytes,
                           "codec_seconds": 0.0, "comm_seconds": stats.comm_seconds, "resets": 0}

    def state_dict(self) -> dict:
        """This rank's state by parameter name (each rank saves its own, as FSDP's sharded state): the
        residuals, the momentum (ef21-sgdm, dgc) and ef21's shared estimate of this rank's shard."""
        return {"format": "gradcomp.fsdp_rs/1", "config": self.config(), "error_feedback": self.error_feedback,
                "step": self.step, "residuals": self.residuals.named(), "momentum": self.momentum.named(),
                "shared": self.shared.named()}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("format") != "gradcomp.fsdp_rs/1":
            raise _C.InvalidArgument(f"CompressedReduceScatter.load_state_dict: not a gradcomp FSDP state (format "
                                     f"{sd.get('format')!r}, expected 'gradcomp.fsdp_rs/1')")
        # Absent in states saved before the other policies came, which could only be "none" or ef's: a
        # residual e read as ef21's -h, with no H beside it, would bias every gradient that follows.
        saved = sd.get("error_feedback")
        if saved is None and self._parsed.name not in ("none", "ef", "ef:scale=auto"):
            saved = "ef (or none, ef:scale=auto: a state saved before ef21, ef21-sgdm and dgc came to FSDP)"
        if saved is not None and saved != self.error_feedback:
            raise _C.InvalidArgument(f"CompressedReduceScatter.load_state_dict: the state was saved with "
                                     f"error_feedback {saved!r}, this reduce-scatter runs {self.error_feedback!r}")
        # States saved before the configuration was kept in them name only their policy (checked above).
        theirs, mine = sd.get("config", {}), self.config()
        diffs = [f"{k}: saved {theirs[k]!r}, now {mine[k]!r}" for k in mine if k in theirs and theirs[k] != mine[k]]
        if diffs:
            raise _C.InvalidArgument("CompressedReduceScatter.load_state_dict: the state was saved with another "
                                     "configuration (" + "; ".join(diffs) + ")")
        self.step = int(sd["step"])
        self._checked_group = None  # the ranks must agree on the step they resume at
        self.residuals.load_named(sd["residuals"])
        self.momentum.load_named(sd.get("momentum", {}))
        self.shared.load_named(sd.get("shared", {}))


def _replicas(module: torch.nn.Module, fqn: str) -> tuple[int, int]:
    """(ranks FSDP reduce-scatters over, replicas it then all-reduces over) for the module's own parameter
    group: a 1-D mesh is (W, 1), HSDP's (W, R); a module without parameters of its own (0, 1).

    Read from FSDP's mesh info (private, feature-detected), which names the data-parallel dimensions
    only: a tensor-parallel dimension is neither. Where it cannot be read, the parameters' DTensor meshes
    decide only when every one is 1-D (one data-parallel dimension, nothing to all-reduce after); a
    wider mesh is refused rather than guessed."""
    try:
        groups = module._get_fsdp_state()._fsdp_param_groups  # noqa: SLF001
        infos = [g.mesh_info for g in groups]
    except AttributeError:
        meshes = [getattr(p, "device_mesh", None) for p in module.parameters()]
        if all(m is not None and m.ndim == 1 for m in meshes):
            return (meshes[0].size() if meshes else 0), 1
        raise _C.BackendUnavailable(f"gradcomp.torch.compress_fsdp: this torch ({torch.__version__}) does not "
                                    f"show module {fqn or '(root)'}'s FSDP mesh, and its parameters' meshes are "
                                    f"not all 1-D: the replicas FSDP all-reduces over cannot be told") from None
    if not infos:
        return 0, 1
    return getattr(infos[0], "shard_mesh_size", 1), getattr(infos[0], "replicate_mesh_size", 1)


def compress_fsdp(model: torch.nn.Module, **kwargs) -> dict[str, CompressedReduceScatter]:
    """Installs a CompressedReduceScatter on every FSDPModule in model; returns them by module name.

    HSDP (a 2-D mesh, replicate x shard): the reduce-scatter within each shard group is gradcomp's and
    returns that group's mean; FSDP then all-reduces (sums, in its reduce dtype, uncompressed) across the R
    replicas and divides by R, its gradient divide factor, so the result is the mean over every rank. A
    tensor-parallel mesh dimension is not a replica (FSDP's mesh info names the data-parallel ones). A
    mesh whose shard dimension is one rank is refused: FSDP calls no reduce-scatter there (use the DDP hook).

    Raises BackendUnavailable when this torch has no FSDP2 custom reduce-scatter (torch < 2.9)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError as e:
        raise _C.BackendUnavailable("gradcomp.torch.compress_fsdp needs FSDP2 (torch.distributed.fsdp.FSDPModule)") from e
    installed: dict[str, CompressedReduceScatter] = {}
    for fqn, m in model.named_modules():
        if not isinstance(m, FSDPModule):
            continue
        if not hasattr(m, "set_custom_reduce_scatter"):
            raise _C.BackendUnavailable(f"gradcomp.torch.compress_fsdp: torch {torch.__version__} has no "
                                        f"FSDPModule.set_custom_reduce_scatter (it came in torch 2.9)")
        shard, replicas = _replicas(m, fqn)
        if shard == 1 and replicas > 1:
            raise _C.InvalidArgument(f"gradcomp.torch.compress_fsdp: module {fqn or '(root)'} is replicated over "
                                     f"{replicas} ranks and sharded over 1: FSDP calls no reduce-scatter there, so "
                                     f"nothing would be compressed (shard over more ranks, or use the DDP hook)")
        rs = CompressedReduceScatter(m, fqn=fqn, **kwargs)
        m.set_custom_reduce_scatter(rs)
        # gradcomp's reduce-scatter returns its shard group's mean; with sums forced FSDP divides by this
        # factor: after its all-reduce across the replicas (HSDP), and with an fp16 reduce dtype partly
        # before the reduce-scatter (about sqrt(R), against overflow: the input is then scaled down, and
        # so is the error-feedback state kept from it).
        m.set_gradient_divide_factor(float(replicas))
        m.set_force_sum_reduction_for_comms(True)
        installed[fqn] = rs
    if not installed:
        raise _C.InvalidArgument("gradcomp.torch.compress_fsdp: the model has no FSDPModule (call fully_shard first)")
    return installed
