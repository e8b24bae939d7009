"""gradcomp for PyTorch: a DDP communication hook and an FSDP2 reduce-scatter that run gradcomp's codecs
with error feedback over torch.distributed's own process groups (gloo on the CPU, NCCL on GPUs).

    import gradcomp.torch as gt
    state = gt.DDPState(ddp, codec="int8", error_feedback="ef")
    ddp.register_comm_hook(state, gt.ddp_hook)
"""

from .ddp import DDPState, ddp_hook
from .fsdp import CompressedReduceScatter, compress_fsdp
from .powersgd import PowerSGDState, powersgd_hook

__all__ = ["CompressedReduceScatter", "DDPState", "PowerSGDState", "compress_fsdp", "ddp_hook", "powersgd_hook"]
