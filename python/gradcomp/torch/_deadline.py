"""Every wait on a collective has a deadline, and a wait that ends in an error says which: the
deadline passed (TimeoutError, with how long this rank actually waited: the process group's own
timeout ends a wait earlier than the deadline asked for when it is the shorter one) or a peer broke
the collective (PeerFailure)."""

from __future__ import annotations

import datetime
import time

from .. import _C


def wait_within(work, timeout: datetime.timedelta, timed_out: str, failed: str) -> None:
    """work.wait(timeout); `timed_out` and `failed` begin the message of the error raised."""
    start = time.monotonic()
    try:
        work.wait(timeout)
    except RuntimeError as e:
        waited = time.monotonic() - start
        if "imed out" in str(e) or "timeout" in str(e).lower():
            raise _C.TimeoutError(f"{timed_out}: gave up after {waited:.0f} s (the deadline: "
                                  f"{timeout.total_seconds():.0f} s, or the process group's timeout where "
                                  f"that is shorter) ({e})") from e
        raise _C.PeerFailure(f"{failed}: {e}") from e
