"""gradcomp's compressed all-reduce built from torch.distributed collectives on any process group (gloo,
NCCL), so it runs under torchrun with no other launcher:

  reduce-scatter  each rank encodes one segment per owner (error feedback at the source), an
                  all_to_all_single delivers them, every owner decodes and sums its segment in fp32,
                  averages it and encodes it once, and an all_gather_into_tensor gives every rank every
                  owner's bytes: all ranks decode the same bytes, so they hold bitwise the same result.
                  For the re-encodable (dense) codecs; 2 (W-1)/W of the compressed size on the wire.
  allgather       every rank's whole payload to every rank, each decoded and summed in rank order: for
                  sparse codecs, whose payloads cannot be summed on the wire (sizes all-gathered first
                  when they vary). W - 1 payloads received per rank.
  randomk         ranks share the seed, so they select the same coordinates: only the values section of
                  the payload is all-reduced, then decoded.
  exact           fp32 all_reduce: tensors below the size threshold and the steps before compression.

Every payload travels in a slot with a 32-byte header (magic, status, origin rank, step, layout hash,
byte count or bad index). A rank whose gradient is non-finite, or whose bucket layout or step differs,
says so in its slot instead of failing alone; the status reaches every rank (through the owner's second
message in reduce-scatter), and all ranks raise the same error. No rank waits for a peer that gave up.
"""

from __future__ import annotations

import datetime
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist

from .. import _C
from .._codec import Codec
from ._deadline import wait_within

HEADER_BYTES = 32
_MAGIC = 0x31484347  # "GCH1"
STATUS_OK, STATUS_NONFINITE, STATUS_LAYOUT, STATUS_STEP, STATUS_STATE_OVERFLOW = 0, 1, 2, 3, 4
_HEADER = np.dtype([("magic", "<u4"), ("status", "<u4"), ("origin", "<u4"), ("step", "<u4"),
                    ("layout", "<u4"), ("reserved", "<u4"), ("value", "<u8")])
assert _HEADER.itemsize == HEADER_BYTES


class Part(NamedTuple):
    """One tensor of a message: elements [start, end) of the buffer, encoded on its own. Lossless parts
    (parameters below the size threshold) travel as fp32 with the `none` codec and keep no residual."""

    start: int
    end: int
    tensor_id: int
    lossless: bool = False


# Gradient dtypes the integrations reduce: fp32 as it is, bf16 / fp16 widened to fp32 (encoded, summed and
# error-fed back there) and rounded back once. float64 would lose precision through the fp32 codecs.
REDUCED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_reduced_dtypes(named: Iterable[tuple[str, torch.dtype]], where: str) -> None:
    """InvalidArgument naming the first tensors whose dtype is not one of REDUCED_DTYPES."""
    wide = [f"{name} ({dtype})" for name, dtype in named if dtype not in REDUCED_DTYPES]
    if wide:
        raise _C.InvalidArgument(f"{where}: the codecs take fp32, and bf16 / fp16 gradients are reduced in fp32 "
                                 f"(float64 would lose precision); not so: {', '.join(wide[:4])}"
                                 f"{' and more' if len(wide) > 4 else ''}")


def widened(t: torch.Tensor) -> torch.Tensor:
    """t itself when fp32, else an fp32 copy (a bf16 / fp16 gradient, reduced in fp32, then written back)."""
    return t if t.dtype == torch.float32 else t.float()


def segment_id(tensor_id: int, segment: int) -> int:
    """The codec's tensor id for one segment (the counter-based RNG's key; 31 bits)."""
    return (tensor_id * 131 + segment) & 0x7FFFFFFF


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


@dataclass
class ExchangeStats:
    bytes_sent: int = 0          # bytes this rank put on the wire (slots and headers included)
    codec_seconds: float = 0.0   # encode + decode wall time (host time; CUDA calls are enqueued)
    comm_seconds: float = 0.0    # waiting for collectives
    skipped: int = 0             # non-finite gradients replaced by zeros (nonfinite="skip")
    saturated: int = 0           # values clamped to the format's range by the encoder
    resets: int = 0              # error-feedback states reset to zero after overflowing (a warning each)
    reset_parts: list = field(default_factory=list)  # the (start, end) of the caller's buffer they covered

    def add(self, other: "ExchangeStats") -> None:
        for f in self.__dataclass_fields__:
            setattr(self, f, getattr(self, f) + getattr(other, f))


@dataclass
class Status:
    code: int = STATUS_OK
    origin: int = 0
    value: int = 0


class Exchange:
    """The collectives over one process group, for one codec. Not thread-safe: one caller (the hook's
    FIFO worker, or FSDP's reduce-scatter stream) issues collectives in the same order on every rank."""

    def __init__(self, codec: Codec, group: Optional[dist.ProcessGroup], timeout: datetime.timedelta,
                 seed: int, skip_nonfinite: bool, threads: int = 1, scale_auto: bool = False):
        self.codec = codec
        self.exact = Codec("none")
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.timeout = timeout
        self.seed = seed
        self.skip_nonfinite = skip_nonfinite
        self.threads = threads
        self.scale_auto = scale_auto  # error feedback as ef:scale=auto (C(c / (1 + omega)) where omega >= 1)
        # DGC's warm-up, (steps into compression, warm-up length), set by the hook per step: a sparse codec
        # sends more than its own k during the first steps (compressors/dgc_warmup.h, the C++ policy's rule
        # through _C.dgc_warmup_entries). Every rank derives it from the step, so the receivers bound each
        # wire by the same count. (0, 0): no warm-up.
        self.warmup = (0, 0)
        # The caller's buffer index -> (parameter, element), for the warnings (set per call by the caller).
        self.name_at: Optional[Callable[[int], tuple[str, int]]] = None
        # Whether an overflowed residual may be reset on this rank alone: not for ef21, whose shared
        # estimate H, the same on every rank, would keep the old h for good (STATUS_STATE_OVERFLOW instead).
        self.resettable = True
        self._buffers: dict[tuple, torch.Tensor] = {}

    def buffer(self, purpose: str, nbytes: int, device: torch.device, dtype=torch.uint8) -> torch.Tensor:
        """A message buffer reused across steps: no allocation (and no page faults on fresh pages) per
        bucket. Nothing refers to it after the call that used it returns."""
        key = (purpose, nbytes, str(device), dtype)
        b = self._buffers.get(key)
        if b is None:
            if len(self._buffers) > 64:
                self._buffers.clear()  # layouts changed (bucket rebuild): drop the old sizes
            b = self._buffers[key] = torch.empty(nbytes, dtype=dtype, device=device)
        return b

    # --- plumbing ------------------------------------------------------------------------------------
    def wait_for(self, work, what: str, stats: ExchangeStats) -> None:
        t0 = time.perf_counter()
        wait_within(work, self.timeout, f"gradcomp {what}: rank {self.rank} waited for its peers",
                    f"gradcomp {what}: the collective failed on rank {self.rank}")
        stats.comm_seconds += time.perf_counter() - t0

    def write_header(self, slot: torch.Tensor, status: Status, step: int, layout: int, value: int) -> None:
        h = np.zeros(1, dtype=_HEADER)
        h["magic"], h["status"], h["origin"], h["step"], h["layout"] = _MAGIC, status.code, status.origin, step, layout
        h["value"] = value
        slot[:HEADER_BYTES].copy_(torch.from_numpy(h.view(np.uint8)))

    @staticmethod
    def read_headers(slots: torch.Tensor) -> np.ndarray:
        return slots[:, :HEADER_BYTES].cpu().contiguous().numpy().view(_HEADER).reshape(-1)

    def check_headers(self, headers: np.ndarray, step: int, layout: int, payload_room: int) -> Status:
        """The first problem any sender reported or any header shows, in rank order."""
        for r, h in enumerate(headers):
            if h["magic"] != _MAGIC:
                raise _C.DecodeError(f"gradcomp: rank {r}'s slot has no gradcomp header (magic {h['magic']:#x})")
            if h["status"] != STATUS_OK:
                return Status(int(h["status"]), int(h["origin"]), int(h["value"]))
            if h["layout"] != layout:
                return Status(STATUS_LAYOUT, r, int(h["layout"]))
            if h["step"] != step:
                return Status(STATUS_STEP, r, int(h["step"]))
            if h["value"] > payload_room:
                raise _C.DecodeError(f"gradcomp: rank {r}'s slot claims {int(h['value'])} payload bytes, "
                                     f"the slot holds {payload_room}")
        return Status()

    def _decode(self, wire: torch.Tensor, out: torch.Tensor, accumulate: bool, stats: ExchangeStats,
                codec: Optional[Codec] = None) -> None:
        stream = torch.cuda.current_stream(out.device).cuda_stream if out.is_cuda else None
        t0 = time.perf_counter()
        (codec or self.codec)._c.decode_into(wire, out, accumulate=accumulate, stream=stream, threads=self.threads)
        stats.codec_seconds += time.perf_counter() - t0

    # --- parts: the tensors of one message, each its own wire -----------------------------------------
    # A message (slot) is [32-byte slot header][wire][wire]..., each wire 16-aligned and self-describing.
    # Every parameter (or parameter segment) is encoded on its own, so its bytes depend only on its own
    # values: never on which bucket it shares, which is what makes a resumed run with other buckets
    # continue bitwise identically.
    def codec_of(self, part: Part) -> Codec:
        return self.exact if part.lossless else self.codec

    def entries(self, part: Part) -> int:
        """The entries part's codec sends this step: 0 (its own k) unless DGC's warm-up asks for more; the
        rule of the C++ DgcFeedback (compressors/error_feedback_policies.cc)."""
        step, length = self.warmup
        if part.lossless or step >= length:
            return 0
        n = part.end - part.start
        return _C.dgc_warmup_entries(self.codec.sparse_entries(n), n, step, length)

    def room(self, parts: list[Part]) -> int:
        return HEADER_BYTES + sum(_align16(self.codec_of(p).max_encoded_bytes(p.end - p.start, self.entries(p)))
                                  for p in parts)

    @staticmethod
    def _rows(parts: list[Part]) -> np.ndarray:
        return np.array(parts, dtype=np.int64).reshape(-1, 4)

    def _entries(self, parts: list[Part]) -> Optional[np.ndarray]:
        return np.array([self.entries(p) for p in parts], dtype=np.int64) if self.warmup[0] < self.warmup[1] else None

    def encode_parts(self, x: torch.Tensor, parts: list[Part], slot: torch.Tensor,
                      residual_in: Optional[torch.Tensor], residual_out: Optional[torch.Tensor], step: int,
                      stats: ExchangeStats, name_at: Optional[Callable[[int], tuple[str, int]]] = None
                      ) -> tuple[Status, int]:
        """Encodes every part into slot after its header (one C++ call); returns (status, bytes used).

        A part whose value is finite where value + residual is not (an error-feedback state grown past
        the float range) has its residual reset to zero for this step, with a warning naming it (name_at:
        x's index -> parameter and element; self.name_at by default), as the C++ policies reset theirs;
        the encode is then retried, and the parts of the caller's buffer reset are in stats.reset_parts
        (an owner's re-encode passes its own name_at and is not listed). Where the senders' state may not
        be reset on one rank (self.resettable false: ef21), that is STATUS_STATE_OVERFLOW. A non-finite
        value is the caller's NonFiniteError."""
        stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else None
        t0 = time.perf_counter()
        given = residual_in
        while True:
            code, bad, used, saturated, skipped = _C.encode_parts_into(
                self.codec._c, self.exact._c, x, self._rows(parts), slot, HEADER_BYTES, residual_in, residual_out,
                seed=self.seed, rank=self.rank, step=step, skip_nonfinite=self.skip_nonfinite,
                scale_auto=self.scale_auto, entries=self._entries(parts), stream=stream, threads=self.threads)
            if code == STATUS_OK or residual_in is None or not bool(torch.isfinite(x[bad])):
                break
            senders = name_at is None  # the caller's own buffer and residuals (not an owner's re-encode)
            if senders and not self.resettable:
                stats.codec_seconds += time.perf_counter() - t0
                return Status(STATUS_STATE_OVERFLOW, self.rank, bad), 0
            part = next(p for p in parts if p.start <= bad < p.end)
            if residual_in is given:
                residual_in = residual_in.clone()  # the caller's residuals stay as committed
            residual_in[part.start:part.end].zero_()
            stats.resets += 1
            if senders:
                stats.reset_parts.append((part.start, part.end))
            names = name_at or self.name_at
            name, element = names(bad) if names else (f"tensor id {part.tensor_id}", bad - part.start)
            warnings.warn(f"gradcomp: the error-feedback residual of {name} overflowed (value + residual at element "
                          f"{element} is not finite on rank {self.rank}); reset to zero for this step",
                          stacklevel=2)
        stats.codec_seconds += time.perf_counter() - t0
        stats.saturated += saturated
        stats.skipped += skipped
        if code != STATUS_OK:
            return Status(STATUS_NONFINITE, self.rank, bad), 0
        return Status(), used

    def decode_parts(self, slot: torch.Tensor, used: int, x: torch.Tensor, parts: list[Part],
                      accumulate: bool, stats: ExchangeStats, origin: int) -> None:
        stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else None
        t0 = time.perf_counter()
        _C.decode_parts_into(self.codec._c, self.exact._c, slot, slot[:used].cpu() if slot.is_cuda else None, used,
                             x, self._rows(parts), accumulate=accumulate, origin=origin,
                             entries=self._entries(parts), stream=stream, threads=self.threads)
        stats.codec_seconds += time.perf_counter() - t0

    def _status_of(self, slots: torch.Tensor, step: int, layout: int, room: int) -> tuple[Status, np.ndarray]:
        headers = self.read_headers(slots)
        return self.check_headers(headers, step, layout, room), headers

    # --- algorithms ----------------------------------------------------------------------------------
    def exact_mean(self, x: torch.Tensor, stats: ExchangeStats) -> None:
        """fp32 sum then division by the world size (what DDP does without a hook, in the same order)."""
        x.div_(self.world)
        self.wait_for(dist.all_reduce(x, group=self.group, async_op=True), "all-reduce", stats)
        stats.bytes_sent += 2 * (self.world - 1) * x.numel() * 4 // self.world

    def split(self, parts: list[Part]) -> list[list[Part]]:
        """Each part cut into world-size segments: segments[s] is what owner s reduces."""
        W = self.world
        out: list[list[Part]] = [[] for _ in range(W)]
        for a, b, tensor_id, lossless in parts:
            seg = -(-(b - a) // W)
            for s in range(W):
                lo, hi = min(b, a + s * seg), min(b, a + (s + 1) * seg)
                out[s].append(Part(lo, hi, segment_id(tensor_id, s), lossless))
        return out

    def reduce_scatter_mean(self, x: torch.Tensor, parts: list[Part],
                            residual_in: Optional[torch.Tensor], residual_out: Optional[torch.Tensor],
                            server_in: Optional[torch.Tensor], server_out: Optional[torch.Tensor], step: int,
                            layout: int, stats: ExchangeStats) -> Status:
        """x <- the mean over ranks, compressed both ways (see the module docstring). parts: (start, end,
        tensor id) of each tensor in x. The server residuals (the owner's re-encode error) are indexed
        like x; only this rank's segments are used."""
        W, me = self.world, self.rank
        segments = self.split(parts)
        slot1 = _align16(max(self.room(seg) for seg in segments))
        send = self.buffer("rs-send", W * slot1, x.device)
        send_slots = send.view(W, slot1)
        for s in range(W):
            status, used = self.encode_parts(x, segments[s], send_slots[s], residual_in, residual_out, step, stats)
            self.write_header(send_slots[s], status, step, layout, used if status.code == STATUS_OK else status.value)
        recv = self.buffer("rs-recv", W * slot1, x.device)
        self.wait_for(dist.all_to_all_single(recv, send, group=self.group, async_op=True), "reduce-scatter", stats)
        stats.bytes_sent += (W - 1) * slot1
        recv_slots = recv.view(W, slot1)
        status, headers = self._status_of(recv_slots, step, layout, slot1)
        mine = segments[me]
        slot2 = _align16(max(self.room(seg) for seg in segments))
        out = self.buffer("ag-send", slot2, x.device)
        used = 0
        if status.code == STATUS_OK:
            # The owner's segments, summed in fp32 in a packed buffer, in rank order.
            owned = sum(p.end - p.start for p in mine)
            acc = self.buffer("rs-acc", owned, x.device, torch.float32)  # the first decode overwrites
            local, at = [], 0
            for p in mine:
                local.append(Part(at, at + p.end - p.start, p.tensor_id, p.lossless))
                at += p.end - p.start
            for r in range(W):
                self.decode_parts(recv_slots[r], int(headers[r]["value"]), acc, local, r > 0, stats, r)
            # (every owned element belongs to a part, so rank 0's overwrite covers acc entirely)
            acc.div_(W)
            sin = torch.cat([server_in[p.start:p.end] for p in mine]) if server_in is not None else None
            sout = torch.empty_like(sin) if sin is not None else None
            # The owner's re-encode draws from its own stream (the high bit) so it never repeats a sender's.
            reencode = [Part(p.start, p.end, p.tensor_id | 0x80000000, p.lossless) for p in local]
            def owned_name_at(i: int) -> tuple[str, int]:  # acc's packed index -> the buffer's, named
                q, p = next((q, p) for q, p in zip(local, mine) if q.start <= i < q.end)
                return self.name_at(p.start + i - q.start) if self.name_at else ("?", i)

            status, used = self.encode_parts(acc, reencode, out, sin, sout, step, stats, owned_name_at)
            if sout is not None and status.code == STATUS_OK:
                for p, q in zip(mine, local):
                    server_out[p.start:p.end].copy_(sout[q.start:q.end])
        self.write_header(out, status, step, layout, used if status.code == STATUS_OK else status.value)
        gathered = self.buffer("ag-recv", W * slot2, x.device)
        self.wait_for(dist.all_gather_into_tensor(gathered, out, group=self.group, async_op=True), "all-gather", stats)
        stats.bytes_sent += (W - 1) * slot2
        gathered_slots = gathered.view(W, slot2)
        headers = self.read_headers(gathered_slots)
        for h in headers:
            if h["status"] != STATUS_OK:
                return Status(int(h["status"]), int(h["origin"]), int(h["value"]))
        for s in range(W):
            self.decode_parts(gathered_slots[s], int(headers[s]["value"]), x, segments[s], False, stats, s)
        return Status()

    def allgather_mean(self, x: torch.Tensor, parts: list[Part],
                       residual_in: Optional[torch.Tensor], residual_out: Optional[torch.Tensor], step: int,
                       layout: int, stats: ExchangeStats) -> Status:
        W = self.world
        room = _align16(self.room(parts))
        mine = torch.empty(room, dtype=torch.uint8, device=x.device)
        status, used = self.encode_parts(x, parts, mine, residual_in, residual_out, step, stats)
        self.write_header(mine, status, step, layout, used if status.code == STATUS_OK else status.value)
        slot = room
        if not self.codec.traits["fixed_size"]:
            # Payload sizes vary by rank: agree on the largest first, then send only that much.
            size = torch.tensor([max(used, HEADER_BYTES)], dtype=torch.int64, device=x.device)
            sizes = torch.empty(W, dtype=torch.int64, device=x.device)
            self.wait_for(dist.all_gather_into_tensor(sizes, size, group=self.group, async_op=True), "all-gather sizes", stats)
            stats.bytes_sent += (W - 1) * 8
            slot = _align16(int(sizes.max()))
        gathered = torch.empty(W * slot, dtype=torch.uint8, device=x.device)
        self.wait_for(dist.all_gather_into_tensor(gathered, mine[:slot], group=self.group, async_op=True),
                   "all-gather", stats)
        stats.bytes_sent += (W - 1) * slot
        slots = gathered.view(W, slot)
        status, headers = self._status_of(slots, step, layout, slot)
        if status.code != STATUS_OK:
            return status
        for r in range(W):
            self.decode_parts(slots[r], int(headers[r]["value"]), x, parts, r > 0, stats, r)
        x.div_(W)
        return Status()

    def randomk_mean(self, x: torch.Tensor, parts: list[Part],
                     residual_in: Optional[torch.Tensor], residual_out: Optional[torch.Tensor], step: int,
                     layout: int, stats: ExchangeStats) -> Status:
        W = self.world
        if x.is_cuda:
            raise _C.InvalidArgument("gradcomp: algorithm 'randomk' runs on cpu tensors; use 'allgather' on cuda")
        wire = torch.empty(_align16(self.room(parts)), dtype=torch.uint8)
        status, used = self.encode_parts(x, parts, wire, residual_in, residual_out, step, stats)
        head = torch.empty(HEADER_BYTES, dtype=torch.uint8)
        self.write_header(head, status, step, layout, used if status.code == STATUS_OK else status.value)
        heads = torch.empty(W * HEADER_BYTES, dtype=torch.uint8)
        self.wait_for(dist.all_gather_into_tensor(heads, head, group=self.group, async_op=True), "all-gather status", stats)
        stats.bytes_sent += (W - 1) * HEADER_BYTES
        status, _ = self._status_of(heads.view(W, HEADER_BYTES), step, layout, wire.numel())
        if status.code != STATUS_OK:
            return status
        # Every part's values section, summed in one all-reduce (fp32; fp16 values widened and rounded
        # back, which every rank does alike).
        if any(p.lossless for p in parts):
            raise _C.InvalidArgument("gradcomp: randomk_mean carries random-k parts only (send the lossless ones "
                                     "with reduce_scatter_mean)")
        sections, at = [], HEADER_BYTES
        for a, b, _, _ in parts:
            nbytes = 48 + int(wire[at + 32:at + 40].view(torch.int64))
            w = wire[at:at + nbytes]
            offset, count, fp16 = self.codec.randomk_values(w)
            dtype, width = (torch.float16, 2) if fp16 else (torch.float32, 4)
            sections.append((at, nbytes, w[offset:offset + width * count].view(dtype)))
            at += _align16(nbytes)
        values = torch.cat([v.float() for _, _, v in sections]) if sections else torch.empty(0)
        self.wait_for(dist.all_reduce(values, group=self.group, async_op=True), "all-reduce values", stats)
        stats.bytes_sent += 2 * (W - 1) * values.numel() * 4 // W
        at = 0
        for (start, nbytes, v), (a, b, _, _) in zip(sections, parts):
            v.copy_(values[at:at + v.numel()])
            at += v.numel()
            self._decode(wire[start:start + nbytes], x[a:b], False, stats)
            # these parts only: the bucket's exact ones were averaged by their own reduce-scatter
            x[a:b].div_(W)
        return Status()


def warn_if_not_contractive(codec: Codec, parts: list[Part], where: str, policy: str, segments: int = 1) -> bool:
    """Error feedback (ef, ef21) assumes a contractive compressor; an unbiased codec whose variance bound
    omega is >= 1 on what is encoded (qsgd at 4 bits, terngrad) is not one, and the residual can grow
    without bound: the same warning as the C++ policy's, naming the remedy. `segments`: each part is
    encoded in that many pieces (reduce-scatter), so omega is taken at the piece's size. Returns whether
    it warned."""
    sizes = [-(-(p.end - p.start) // segments) for p in parts if not p.lossless]
    omega = max((codec.variance_bound(n) for n in sizes), default=0.0)
    if omega < 1.0:
        return False
    remedy = ("error_feedback='ef:scale=auto' sends C(c) / (1 + omega) instead" if policy == "ef" else
              "use a biased codec (top-k, sign, int8) or 'ef:scale=auto'")
    warnings.warn(f"{where}: error feedback '{policy}' with codec '{codec.canonical_spec}': its variance bound "
                  f"omega = {omega:g} is >= 1, so it is not contractive and the residual can grow without "
                  f"bound; {remedy}", RuntimeWarning, stacklevel=2)
    return True


def raise_status(status: Status, where: str, name_at: Callable[[int], tuple[str, int]], step: int,
                 expected_layout: int) -> None:
    """The same exception on every rank for a status any rank reported."""
    if status.code == STATUS_NONFINITE:
        name, index = name_at(status.value)
        e = _C.NonFiniteError(f"gradcomp {where}: the gradient of parameter '{name}' holds NaN or Inf at element "
                              f"{index} on rank {status.origin} (step {step}); nothing was applied and the "
                              f"error-feedback residuals are unchanged (nonfinite='skip' sends zeros instead)")
        e.tensor_id, e.index = 0, index
        e.parameter, e.rank = name, status.origin
        raise e
    if status.code == STATUS_STATE_OVERFLOW:
        name, index = name_at(status.value)
        raise _C.NonFiniteError(f"gradcomp {where}: the error-feedback state of parameter '{name}' overflowed at "
                                f"element {index} on rank {status.origin} (step {step}; the gradient is finite): "
                                f"ef21's estimate h cannot be reset on one rank, since the shared estimate H of every "
                                f"rank holds it; nothing was applied (restart the hook's state, or resume from a "
                                f"checkpoint)")
    if status.code == STATUS_LAYOUT:
        raise _C.CollectiveMismatch(f"gradcomp {where}: rank {status.origin} reduces a bucket with another layout "
                                    f"(hash {status.value:#010x}, this rank {expected_layout:#010x}) at step {step}: "
                                    f"the ranks' models or bucket settings differ")
    if status.code == STATUS_STEP:
        raise _C.CollectiveMismatch(f"gradcomp {where}: rank {status.origin} is at step {status.value}, this rank at "
                                    f"step {step}: the ranks' hook states were restored from different checkpoints")
    raise _C.Error(f"gradcomp {where}: unknown status {status.code} from rank {status.origin}")
