"""gradcomp.Codec: a codec from its spec string, with outputs allocated when the caller gives none.

Outputs follow the input's kind: a torch tensor in gives a torch tensor out (on its device), anything
else gives a numpy array. Passing `out` avoids every allocation; nothing is ever copied behind the
caller's back (a float64 or non-contiguous array is a TypeError, not a silent conversion).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from . import _C


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _empty_like_kind(x: Any, n: int, dtype: str) -> Any:
    if _is_torch(x):
        import torch

        return torch.empty(n, dtype=getattr(torch, dtype), device=x.device)
    return np.empty(n, dtype=dtype)


def _numel(x: Any) -> int:
    return int(x.numel()) if _is_torch(x) else int(np.size(x))


def _stream_for(x: Any, stream: Optional[int]) -> Optional[int]:
    """The caller's stream; for a CUDA torch tensor without one, torch's current stream on its device.
    (`is_cuda` is only on torch tensors: one attribute lookup, the small-tensor path's cost.)"""
    if stream is None and getattr(x, "is_cuda", False):
        import torch

        return torch.cuda.current_stream(x.device).cuda_stream
    return stream


def _writable(a: Any) -> Any:
    """An output array as the binding imports it cheapest. nanobind asks a writable argument's __dlpack__
    for a versioned capsule first; numpy < 2.1 refuses with a TypeError that is raised, formatted and
    caught on every call (0.4 us, a third of a 1K-value encode). A numpy array goes through the buffer
    protocol instead, which nanobind reads directly (and which still refuses a read-only array)."""
    return memoryview(a) if type(a) is np.ndarray else a


class Encoded(NamedTuple):
    """One encode: `wire` is the wire buffer (a view of exactly wire_bytes bytes of the output). A named
    tuple, not a dataclass: it is made on every call, and small tensors pay for every microsecond."""

    wire: Any
    wire_bytes: int
    saturated: int
    entries: int
    exact_fallback: bool

    @staticmethod
    def of(out: Any, r: tuple) -> "Encoded":
        """From out and the C++ call's (wire_bytes, saturated, entries, exact_fallback), built by tuple.__new__:
        the generated NamedTuple constructor is a Python function and costs a small call 0.2 us."""
        return _new_tuple(Encoded, (out[: r[0]], *r))


_new_tuple = tuple.__new__


class Codec:
    """A gradcomp codec, e.g. Codec("int8:block=256"), Codec("topk:ratio=0.01,values=fp16").

    encode / encode_with_residual / decode take float32 contiguous arrays (any shape, read as flat) and
    uint8 wire buffers. Stochastic codecs draw from a counter-based stream keyed by (seed, rank, step,
    tensor_id): the same context gives the same bytes, in Python and in C++.
    """

    def __init__(self, spec: str):
        self._c = _C.make_codec(spec)

    # --- description -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._c.name

    @property
    def spec(self) -> str:
        return self._c.spec

    @property
    def canonical_spec(self) -> str:
        return self._c.canonical_spec

    @property
    def traits(self) -> dict:
        return self._c.traits

    def max_encoded_bytes(self, n: int, k: int = 0) -> int:
        return self._c.max_encoded_bytes(n, k)

    def sparse_entries(self, n: int) -> int:
        return self._c.sparse_entries(n)

    def variance_bound(self, n: int) -> float:
        """omega with E||C(x) - x||^2 <= omega ||x||^2 for an unbiased stochastic codec on n values (0 for the
        deterministic and the biased ones); ErrorFeedback("ef:scale=auto") sends C / (1 + omega)."""
        return self._c.variance_bound(n)

    def __repr__(self) -> str:
        return f"Codec({self.canonical_spec!r})"

    def __reduce__(self):
        return (Codec, (self.spec,))

    # --- encode / decode ---------------------------------------------------------------------------
    def encode(self, x: Any, out: Any = None, *, seed: int = 0, rank: int = 0, step: int = 0,
               tensor_id: int = 0, k: int = 0, stream: Optional[int] = None, threads: int = 1) -> Encoded:
        """Encodes x into out (uint8, >= max_encoded_bytes(x.size)); allocates out when None."""
        if out is None:
            out = _empty_like_kind(x, self.max_encoded_bytes(_numel(x), k), "uint8")
        r = self._c.encode_into(x, _writable(out), seed=seed, rank=rank, step=step, tensor_id=tensor_id, k=k,
                                stream=_stream_for(x, stream), threads=threads)
        return _new_tuple(Encoded, (out[: r[0]], *r))  # Encoded.of, inlined: this is the small-tensor path

    def encode_with_residual(self, grad: Any, residual_in: Any, residual_out: Any = None, out: Any = None, *,
                             seed: int = 0, rank: int = 0, step: int = 0, tensor_id: int = 0, k: int = 0,
                             stream: Optional[int] = None, threads: int = 1) -> Encoded:
        """Writes C(grad + residual_in) and residual_out = (grad + residual_in) - D(C(...)).

        residual_out defaults to residual_in (updated in place)."""
        if residual_out is None:
            residual_out = residual_in
        if out is None:
            out = _empty_like_kind(grad, self.max_encoded_bytes(_numel(grad), k), "uint8")
        r = self._c.encode_with_residual_into(grad, residual_in, _writable(residual_out), _writable(out),
                                              seed=seed, rank=rank, step=step, tensor_id=tensor_id, k=k,
                                              stream=_stream_for(grad, stream), threads=threads)
        return Encoded.of(out, r)

    def decode(self, wire: Any, out: Any = None, *, accumulate: bool = False, stream: Optional[int] = None,
               threads: int = 1) -> Any:
        """Validates wire and decodes it into out (overwrite, or fp32 add with accumulate=True).

        Allocates out (float32, the element count the header names) when None; returns out."""
        if out is None:
            if accumulate:
                raise _C.InvalidArgument("decode: accumulate=True needs an `out` to add into")
            host = wire.cpu() if _is_torch(wire) else wire
            n = self._c.inspect(host)["num_elements"]
            out = _empty_like_kind(wire, n, "float32")
        self._c.decode_into(wire, _writable(out), accumulate=accumulate, stream=_stream_for(wire, stream), threads=threads)
        return out

    def inspect(self, wire: Any) -> dict:
        """The validated header of a wire buffer in host memory, as a dict."""
        return self._c.inspect(wire)

    def randomk_values(self, wire: Any) -> tuple[int, int, bool]:
        """randomk: (byte offset, count, fp16) of the values section of a wire buffer."""
        return self._c.randomk_values(wire)
