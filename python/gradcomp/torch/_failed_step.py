"""A step whose bucket failed fails its later buckets at once. DDP hands the hook every bucket of a
backward and reads their results only at its end, so without this each later bucket of a step with a
dead peer would wait out the deadline again (k buckets: k deadlines), and a bucket after a failed
configuration check would repeat the check. The later buckets raise the first one's error type,
naming it; the next step starts clean."""

from __future__ import annotations

from typing import Optional

from .. import _C


class FailedStep:
    def __init__(self) -> None:
        # (step, error type, message): the type and text rather than the exception, so that a state
        # holding one still pickles.
        self._failed: Optional[tuple[int, type, str]] = None

    def record(self, step: int, error: BaseException) -> None:
        if self._failed is None or self._failed[0] != step:
            self._failed = (step, type(error), str(error))

    def raise_if_failed(self, step: int, where: str) -> None:
        if self._failed is None or self._failed[0] != step:
            return
        _, first, message = self._failed
        kind = first if issubclass(first, _C.Error) else _C.Error  # gradcomp's own types take a message
        raise kind(f"{where}: step {step}: this bucket was not reduced, an earlier bucket of the step failed "
                   f"({first.__name__}: {message})")
