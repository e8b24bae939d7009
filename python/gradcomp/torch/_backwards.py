"""Where a backward begins, from the buckets DDP hands a hook. DDP launches a backward's buckets in
increasing index order, so an index below the last one's begins a new backward, and so does the same
index after a last bucket (backwards of one bucket). The same index without an end is the same
backward: static_graph's first step hands over every bucket as index 0, none of them last.

The hooks count a step at its last bucket (GradBucket.is_last()), but that bucket never comes when
DDP skips it: with skip_all_reduce_unused_params, a bucket whose parameters were all unused is not
handed over. Such a backward was a step all the same, or start_iter would never be reached and every
step would reuse one step's random streams: the hooks count it when the next backward begins (and a
checkpoint counts it)."""

from __future__ import annotations

from typing import Optional


class Backwards:
    def __init__(self) -> None:
        self._last_index: Optional[int] = None
        self._ended = True

    def bucket(self, index: int, last: bool) -> tuple[bool, bool]:
        """(this bucket begins a backward, the backward before it ended without its last bucket)"""
        begins = (self._last_index is None or index < self._last_index
                  or (index == self._last_index and self._ended))
        missed_end = begins and not self._ended
        if begins:
            self._ended = False
        if last:
            self._ended = True
        self._last_index = index
        return begins, missed_end

    def step(self, count: int, index: int, last: bool) -> tuple[int, int, bool]:
        """The hooks' one counting rule: from the steps counted so far and this bucket, (the bucket's
        step, the count after it, whether it begins a backward)."""
        begins, missed_end = self.bucket(index, last)
        step = count + 1 if missed_end else count  # the last backward's last bucket never came
        return step, step + 1 if last else step, begins

    @property
    def uncounted(self) -> int:
        """1 while the last backward ended without its last bucket (not counted yet), else 0."""
        return 0 if self._ended else 1
