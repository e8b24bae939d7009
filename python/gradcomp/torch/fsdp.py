"""A compressed reduce-scatter for FSDP2 (FSDPModule.set_custom_reduce_scatter, torch >= 2.9).

    import gradcomp.torch as gt
    gt.compress_fsdp(model, codec="int8", error_feedback="ef")   # every FSDPModule in the model

error_feedback: "ef", "none" or "ef:scale=auto" (as the DDP hook's, ddp.py).

FSDP hands the reduce-scatter one flat buffer: every parameter's gradient cut into world-size chunks
along dim 0, chunk r of every parameter back to back for rank r. Each rank encodes the chunk of every
destination (error feedback at the source), an all_to_all_single delivers them, and each rank decodes and
sums its chunk in fp32 and divides by the world size. gradcomp owns the scaling: compress_fsdp sets
FSDP's gradient divide factor to 1 and forces sum reductions, so FSDP neither pre- nor post-divides.
Residuals are kept per module and converted to {parameter name: residual} for checkpoints.
"""

from __future__ import annotations

import datetime
from typing import Optional

import torch
import torch.distributed as dist

from .. import _C
from .._codec import Codec
from ._exchange import STATUS_OK, Exchange, ExchangeStats, Part, _align16, raise_status, warn_if_not_contractive
from ._layout import Layout, Piece, ResidualStore


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


class CompressedReduceScatter:
    """FSDP2's ReduceScatter interface (allocate + __call__), compressed with a gradcomp codec."""

    def __init__(self, module: torch.nn.Module, *, codec: str = "int8", error_feedback: str = "ef", seed: int = 0,
                 nonfinite: str = "error", timeout: datetime.timedelta = datetime.timedelta(minutes=5),
                 threads: int = 1, min_numel: int = 0, fqn: str = ""):
        if error_feedback not in ("none", "ef", "ef:scale=auto"):
            raise _C.InvalidArgument(f"CompressedReduceScatter: error_feedback must be 'none', 'ef' or "
                                     f"'ef:scale=auto' (ef21, ef21-sgdm and dgc are the DDP hook's), got {error_feedback!r}")
        if nonfinite not in ("error", "skip"):
            raise _C.InvalidArgument(f"CompressedReduceScatter: nonfinite must be 'error' or 'skip', got {nonfinite!r}")
        self.module = module
        self.fqn = fqn
        self.codec = Codec(codec)
        if not isinstance(min_numel, int) or min_numel < 0:
            raise _C.InvalidArgument(f"CompressedReduceScatter: min_numel must be an integer >= 0, got {min_numel!r}")
        self.min_numel = min_numel  # parameters with fewer elements are reduced exactly (fp32)
        self.error_feedback = error_feedback
        self.seed = seed
        self.nonfinite = nonfinite
        self.timeout = timeout
        self.threads = threads
        self.residuals = ResidualStore()
        self.step = 0
        self.last_stats: dict = {}
        self._exchange: Optional[Exchange] = None
        self._warned_not_contractive = False

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op=None, async_op: bool = False):
        if self._exchange is None or self._exchange.group is not group:
            self._exchange = Exchange(self.codec, group, self.timeout, self.seed, self.nonfinite == "skip",
                                      self.threads, self.error_feedback == "ef:scale=auto")
        ex = self._exchange
        W = ex.world
        x = input_tensor if input_tensor.dtype == torch.float32 else input_tensor.float()
        n = x.numel()
        if n % W:
            raise _C.InvalidArgument(f"CompressedReduceScatter: input of {n} elements does not split into {W} chunks")
        chunk = n // W
        layout = _fsdp_layout(self.module, n, W, self.fqn)
        ex.name_at = layout.name_at
        ef = self.error_feedback != "none"
        rin = self.residuals.current(layout, x.device) if ef else None
        rout = self.residuals.scratch(layout) if ef else None
        if ef:
            rout.copy_(rin)  # padding elements are never encoded; their (zero) residual carries over
        stats = ExchangeStats()
        # Destination r gets every parameter's chunk r: one wire per (parameter, chunk).
        per_dest: list[list[Part]] = [[] for _ in range(W)]
        for part in layout.parts(self.min_numel):
            per_dest[min(part[0] // chunk, W - 1)].append(Part(*part))
        if self.error_feedback == "ef" and not self._warned_not_contractive:
            self._warned_not_contractive = True  # its layout is the module's, the same every step
            warn_if_not_contractive(self.codec, [p for parts in per_dest for p in parts], "gradcomp FSDP reduce-scatter",
                                    "ef")
        slot = _align16(max(ex.room(parts) for parts in per_dest))
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

    def state_dict(self) -> dict:
        return {"format": "gradcomp.fsdp_rs/1", "step": self.step, "residuals": self.residuals.named()}

    def load_state_dict(self, sd: dict) -> None:
        self.step = int(sd["step"])
        self.residuals.load_named(sd["residuals"])


def compress_fsdp(model: torch.nn.Module, **kwargs) -> dict[str, CompressedReduceScatter]:
    """Installs a CompressedReduceScatter on every FSDPModule in model; returns them by module name.

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
        rs = CompressedReduceScatter(m, fqn=fqn, **kwargs)
        m.set_custom_reduce_scatter(rs)
        m.set_gradient_divide_factor(1.0)
        m.set_force_sum_reduction_for_comms(True)
        installed[fqn] = rs
    if not installed:
        raise _C.InvalidArgument("gradcomp.torch.compress_fsdp: the model has no FSDPModule (call fully_shard first)")
    return installed
