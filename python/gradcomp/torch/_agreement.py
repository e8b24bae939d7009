"""Before the first step, every rank checks that all ranks run the same configuration: one all-gather of
a fixed-size descriptor (the configuration in canonical form), compared on every rank. A different codec,
error feedback, algorithm, threshold or seed on one rank is the same CollectiveMismatch on every rank,
naming the ranks and the differing values; nothing else is exchanged first, so nothing can hang on it."""

from __future__ import annotations

import datetime
import json

import torch
import torch.distributed as dist

from .. import _C
from ._deadline import wait_within

DESCRIPTOR_BYTES = 1024


def check_ranks_agree(config: dict, group, timeout: datetime.timedelta, what: str, device: torch.device) -> None:
    text = json.dumps(config, sort_keys=True).encode()
    if len(text) > DESCRIPTOR_BYTES:
        raise _C.InvalidArgument(f"{what}: the configuration descriptor is {len(text)} bytes, the limit is "
                                 f"{DESCRIPTOR_BYTES}")
    world = dist.get_world_size(group)
    mine = torch.zeros(DESCRIPTOR_BYTES, dtype=torch.uint8)
    mine[:len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    mine = mine.to(device)
    everyone = torch.empty(world * DESCRIPTOR_BYTES, dtype=torch.uint8, device=device)
    work = dist.all_gather_into_tensor(everyone, mine, group=group, async_op=True)
    wait_within(work, timeout, f"{what}: the configuration check did not complete (a rank did not start)",
                f"{what}: the configuration check failed")
    rows = everyone.view(world, DESCRIPTOR_BYTES).cpu().numpy()
    configs = [json.loads(bytes(r).rstrip(b"\0") or b"{}") for r in rows]
    reference = configs[0]
    for rank, c in enumerate(configs):
        if c != reference:
            keys = sorted(k for k in set(c) | set(reference) if c.get(k) != reference.get(k))
            diffs = "; ".join(f"{k}: rank 0 has {reference.get(k)!r}, rank {rank} has {c.get(k)!r}" for k in keys)
            raise _C.CollectiveMismatch(f"{what}: the ranks' configurations differ ({diffs}); every rank must "
                                        f"use the same settings")
