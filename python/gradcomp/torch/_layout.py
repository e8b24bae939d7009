"""Where each parameter's elements sit in a flat buffer that gradcomp compresses, and error-feedback
residuals that follow parameters rather than buffers.

DDP's buckets (rebuilt after the first iteration, resized by bucket_cap_mb) and FSDP2's reduce-scatter
inputs (every parameter cut into world-size chunks) are both flat buffers made of pieces of named
parameters. A Layout lists those pieces; ResidualStore keeps one flat residual per layout and converts
it to and from {parameter name: tensor of the parameter's size}. That named form is what checkpoints
hold, so a resumed run continues bitwise identically whatever the buckets look like on the new instance.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from .. import _C


@dataclass(frozen=True)
class Piece:
    name: str         # parameter name (the module's fully qualified name, without DDP's "module." prefix)
    name_offset: int  # first element of the piece within the parameter (flattened)
    offset: int       # first element within the flat buffer
    numel: int
    full_numel: int   # the parameter's element count


class Layout:
    """The pieces of a flat buffer, in buffer order; `key` identifies the layout across steps."""

    def __init__(self, pieces: list[Piece], numel: int):
        self.pieces = pieces
        self.numel = numel
        text = ";".join(f"{p.name}@{p.name_offset}+{p.numel}>{p.offset}" for p in pieces) + f"|{numel}"
        self.key = text
        self.hash32 = zlib.crc32(text.encode())

    def parts(self, min_numel: int = 0) -> list[tuple[int, int, int, bool]]:
        """(start, end, tensor id, lossless) per piece: what the exchange encodes, each on its own.
        The id (the stochastic codecs' stream) comes from the parameter's name and the piece's place in
        it; parameters with fewer than min_numel elements are lossless (sent as fp32)."""
        return [(p.offset, p.offset + p.numel, zlib.crc32(f"{p.name}@{p.name_offset}".encode()) & 0x7FFFFFFF,
                 p.full_numel < min_numel) for p in self.pieces]

    def name_at(self, offset: int) -> tuple[str, int]:
        """The parameter and element index (within the parameter) of buffer element `offset`."""
        for p in self.pieces:
            if p.offset <= offset < p.offset + p.numel:
                return p.name, p.name_offset + offset - p.offset
        return "<padding>", offset


class ResidualStore:
    """One flat fp32 residual per layout, plus residuals loaded by name and not yet placed.

    Double-buffered: a step writes its new residual into `scratch(layout)` and `commit(layout)` swaps
    it in only when the whole step succeeded, so a failed step (a non-finite gradient, a mismatch
    between ranks) leaves the residuals exactly as they were.
    """

    def __init__(self):
        self._current: dict[str, torch.Tensor] = {}
        self._scratch: dict[str, torch.Tensor] = {}
        self._layouts: dict[str, Layout] = {}
        self._pending: dict[str, torch.Tensor] = {}  # named, from load() or from a replaced layout

    def current(self, layout: Layout, device: torch.device) -> torch.Tensor:
        buf = self._current.get(layout.key)
        if buf is None:
            buf = torch.zeros(layout.numel, dtype=torch.float32, device=device)
            self._place_pending(layout, buf)
            self._current[layout.key] = buf
            self._layouts[layout.key] = layout
        return buf

    def scratch(self, layout: Layout) -> torch.Tensor:
        cur = self._current[layout.key]
        s = self._scratch.get(layout.key)
        if s is None or s.shape != cur.shape or s.device != cur.device:
            s = torch.empty_like(cur)
            self._scratch[layout.key] = s
        return s

    def commit(self, layout: Layout) -> None:
        self._current[layout.key], self._scratch[layout.key] = self._scratch[layout.key], self._current[layout.key]

    def _place_pending(self, layout: Layout, buf: torch.Tensor) -> None:
        """Moves residuals of this layout's parameters from other layouts and from load() into buf."""
        names = {p.name for p in layout.pieces}
        for key in [k for k, lay in self._layouts.items() if any(p.name in names for p in lay.pieces)]:
            # added to what is still pending, not put in its place: placed elements are zero there, and
            # another piece of the same parameter may still be waiting
            for name, t in self._named_of(self._layouts[key], self._current[key]).items():
                self._pending[name] = self._pending[name] + t if name in self._pending else t
            del self._layouts[key], self._current[key]
            self._scratch.pop(key, None)
        for p in layout.pieces:
            src = self._pending.get(p.name)
            if src is None:
                continue
            if src.numel() != p.full_numel:
                raise _C.InvalidArgument(f"gradcomp: the saved state of parameter '{p.name}' holds {src.numel()} "
                                         f"values, the parameter {p.full_numel} (a checkpoint of another model?)")
            flat = src.reshape(-1)
            buf[p.offset:p.offset + p.numel].copy_(flat[p.name_offset:p.name_offset + p.numel])
            # The layout holds these elements now: named() adds what is still pending to what the layouts
            # hold, so a placed element must not stay pending too (before, a parameter cut into FSDP chunks
            # stayed pending whole, and a checkpoint after a resume held loaded + current).
            flat[p.name_offset:p.name_offset + p.numel] = 0.0
        # What is left pending of these parameters is another layout's to place (FSDP's shard of ef21's H
        # leaves the other ranks' shards, which this rank saved as zeros): nothing left, nothing kept.
        for name in names:
            src = self._pending.get(name)
            if src is not None and not bool(src.any()):
                del self._pending[name]

    @staticmethod
    def _named_of(layout: Layout, buf: torch.Tensor) -> dict[str, torch.Tensor]:
        named: dict[str, torch.Tensor] = {}
        for p in layout.pieces:
            t = named.get(p.name)
            if t is None:
                t = named[p.name] = torch.zeros(p.full_numel, dtype=torch.float32)
            t[p.name_offset:p.name_offset + p.numel].copy_(buf[p.offset:p.offset + p.numel])
        return named

    def named(self) -> dict[str, torch.Tensor]:
        """{parameter name: residual (flat, the parameter's element count, on the CPU)}."""
        out = {k: v.clone() for k, v in self._pending.items()}
        for key, layout in self._layouts.items():
            for name, t in self._named_of(layout, self._current[key].cpu()).items():
                if name in out:
                    out[name] += t  # pieces of one parameter from two layouts (FSDP: one each)
                else:
                    out[name] = t
        return out

    def load_named(self, named: dict[str, torch.Tensor]) -> None:
        self._current.clear()
        self._scratch.clear()
        self._layouts.clear()
        self._pending = {k: v.detach().to(torch.float32).cpu().reshape(-1).clone() for k, v in named.items()}

    def squared_norm(self) -> float:
        return float(sum(float(torch.dot(b, b)) for b in self._current.values()))
