"""gradcomp: gradient compression for distributed training.

The codecs and error-feedback policies of gradcomp's C++ library, over any array that speaks DLPack
(numpy arrays, torch tensors on the CPU, CUDA tensors in a CUDA build), zero-copy:

    import gradcomp
    codec = gradcomp.Codec("int8:block=256")
    enc = codec.encode(x)                 # enc.wire: the uint8 wire buffer, same bytes as C++
    y = codec.decode(enc.wire)

PyTorch integration lives in gradcomp.torch (a DDP communication hook, an FSDP2 reduce-scatter); it
imports torch, this module does not.
"""

from . import _C
from ._C import (
    BackendUnavailable,
    CollectiveMismatch,
    CompressOutcome,
    ConcurrentUse,
    DecodeError,
    EncodeResult,
    Error,
    ErrorFeedback,
    InvalidArgument,
    NonFiniteError,
    PeerFailure,
    TimeoutError,
    TrainingDiverged,
    TransportError,
    codecs,
    decode_any,
    inspect_any,
)
from ._codec import Codec, Encoded

__version__ = "0.1.0"
build_info = dict(_C.build_info)

__all__ = [
    "BackendUnavailable",
    "Codec",
    "CollectiveMismatch",
    "CompressOutcome",
    "ConcurrentUse",
    "DecodeError",
    "Encoded",
    "EncodeResult",
    "Error",
    "ErrorFeedback",
    "InvalidArgument",
    "NonFiniteError",
    "PeerFailure",
    "TimeoutError",
    "TrainingDiverged",
    "TransportError",
    "build_info",
    "codecs",
    "decode_any",
    "inspect_any",
]
