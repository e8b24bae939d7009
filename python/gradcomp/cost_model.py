"""The cost model from Python: what a step of this training would take on another link, and which codec
would pay there. The formulas are the C++ ones (collectives/cost_model.h through gradcomp._C): an
all-reduce costs its algorithm's alpha-beta wire time plus the codec work at the codec's measured speed;
communication hides behind the part of backward that runs after the first bucket is ready:

    step = compute + max(0, wire + codec - hideable)

which is also how `gradcomp train` writes model_step_ms[LINKS] into its summary, so harness runs and
PyTorch runs are modelled alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from . import _C
from ._codec import Codec

# What the codec-bound diagnosis compares: none, the cheap dense cast, the 8- and 4-bit block quantizers,
# the 4-bit block-scaled float formats (OCP MXFP4, NVFP4), 1-bit sign and 1 % top-k (the lossy ones with
# error feedback).
CANDIDATE_CODECS = ("none", "bf16", "int8", "int4", "mxfp4", "nvfp4", "sign", "topk:ratio=0.01")

_speeds: dict[tuple[str, str], dict[str, float]] = {}


def codec_speeds(codec: str, error_feedback: str = "none") -> dict[str, float]:
    """Seconds per element on this CPU, one thread, measured once per process: encode and decode, and for a
    rotate=hadamard codec unrotated_encode, unrotated_decode and rotate (how the compressed ring runs it)."""
    key = (codec, error_feedback)
    if key not in _speeds:
        _speeds[key] = dict(_C.codec_speeds(codec, error_feedback, n=1 << 18, repeats=3))
    return _speeds[key]


def codec_speed(codec: str, error_feedback: str = "none") -> tuple[float, float]:
    """(encode, decode) seconds per element on this CPU, one thread; measured once per process."""
    s = codec_speeds(codec, error_feedback)
    return s["encode"], s["decode"]


def _error_feedback(codec: str) -> str:
    return "none" if codec == "none" else "ef"


@dataclass(frozen=True)
class BucketTraffic:
    """One bucket of a step: `elements` values of which `compressed` go through the codec (the rest,
    small tensors kept exact, as fp32)."""
    elements: int
    compressed: int


def wire_and_codec_ms(codec: str, buckets: Iterable[BucketTraffic], nodes: int, links: str,
                      algorithm: str = "auto", measure_codec: bool = True,
                      ranks_per_node: int = 1) -> tuple[float, float]:
    """The modelled wire time and codec time (ms) of one step's buckets on `links` ("inter=1gbit/50us"),
    nodes x ranks_per_node ranks. measure_codec=False leaves the codec time at 0 (the caller has a
    measured one)."""
    zero = dict.fromkeys(("encode", "decode", "unrotated_encode", "unrotated_decode", "rotate"), 0.0)
    s = codec_speeds(codec, _error_feedback(codec)) if measure_codec and codec != "none" else zero
    wire = work = 0.0
    for b in buckets:
        if b.compressed > 0:
            p = _C.predict_allreduce(codec, b.compressed, nodes, links, ranks_per_node, algorithm=algorithm,
                                     error_feedback=_error_feedback(codec),
                                     encode_seconds_per_element=s["encode"], decode_seconds_per_element=s["decode"],
                                     unrotated_encode_seconds_per_element=s["unrotated_encode"],
                                     unrotated_decode_seconds_per_element=s["unrotated_decode"],
                                     rotate_seconds_per_element=s["rotate"])
            wire += p["wire_seconds"]
            work += p["codec_seconds"]
        if b.elements > b.compressed:
            wire += _C.predict_allreduce("none", b.elements - b.compressed, nodes, links, ranks_per_node,
                                         algorithm="ring")["wire_seconds"]
    return 1e3 * wire, 1e3 * work


def step_ms(compute_ms: float, hideable_ms: float, wire_ms: float, codec_ms: float) -> float:
    """The modelled step: compute plus the communication that overlap cannot hide."""
    return compute_ms + max(0.0, wire_ms + codec_ms - hideable_ms)


@dataclass(frozen=True)
class Alternative:
    codec: str
    step_ms: float
    wire_ms: float
    codec_ms: float


def alternatives(buckets: Sequence[BucketTraffic], nodes: int, links: str, compute_ms: float, hideable_ms: float,
                 candidates: Sequence[str] = CANDIDATE_CODECS, ranks_per_node: int = 1) -> list[Alternative]:
    """Each candidate codec's modelled step on `links` (all of a bucket compressed but what is kept
    exact now), fastest first; a candidate no algorithm here can carry is left out (a spec that is not a
    codec is an error)."""
    out = []
    for codec in candidates:
        Codec(codec)   # InvalidArgument naming a bad spec
        try:
            wire, work = wire_and_codec_ms(codec, buckets, nodes, links, ranks_per_node=ranks_per_node)
        except _C.InvalidArgument:
            continue
        out.append(Alternative(codec, step_ms(compute_ms, hideable_ms, wire, work), wire, work))
    return sorted(out, key=lambda a: a.step_ms)


def effective_link(bytes_sent: float, seconds: float) -> str | None:
    """A link spec of the rate this rank's traffic actually moved at (no latency term), or None."""
    if not (bytes_sent > 0 and seconds > 0 and math.isfinite(bytes_sent / seconds)):
        return None
    return f"inter={bytes_sent / seconds:.6g}B/0us"
