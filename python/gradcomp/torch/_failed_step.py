"""What a hook does after one of its buckets failed. DDP hands the hook every bucket of a backward and
reads their results only at its end, so without this each later bucket of a step with a dead peer
would wait out the deadline again (k buckets: k deadlines), and a bucket after a failed configuration
check would repeat the check.

Two kinds of failure:
- raised on every rank at the same bucket (NonFiniteError, CollectiveMismatch: both come from what the
  ranks exchanged): every rank skips the backward's later buckets alike, so the ranks' collectives
  stay in line, and the next backward starts clean;
- possibly on this rank alone (a timeout, a peer failure, a payload that does not decode, anything
  else): the other ranks may have gone on (a straggler's collective still completes against what this
  rank posted), so this rank's later collectives would pair with the wrong ones. The state is broken:
  every later bucket fails at once, saying so, until load_state_dict() on every rank (or a new state
  on a new process group)."""

from __future__ import annotations

from typing import Optional

from .. import _C

# Raised by every rank at the same bucket: the ranks stay in line when all of them skip what follows.
_ON_EVERY_RANK = (_C.NonFiniteError, _C.CollectiveMismatch)


class FailedStep:
    def __init__(self) -> None:
        # (step, error type, message): the type and text rather than the exception, so that a state
        # holding one still pickles.
        self._this_backward: Optional[tuple[int, type, str]] = None
        self._broken: Optional[tuple[int, type, str]] = None

    def begin_backward(self) -> None:
        """At a backward's first bucket (_backwards.py): the last one's failure, raised on every rank,
        is over."""
        self._this_backward = None

    def record(self, step: int, error: BaseException) -> None:
        failure = (step, type(error), str(error))
        if isinstance(error, _ON_EVERY_RANK):
            if self._this_backward is None:
                self._this_backward = failure
        elif self._broken is None:
            self._broken = failure

    def raise_if_failed(self, step: int, where: str) -> None:
        if self._broken is not None:
            failed_at, first, message = self._broken
            raise _C.PeerFailure(f"{where}: step {step}: not reduced: this rank failed at step {failed_at} "
                                 f"({first.__name__}: {message}), which can leave its collectives out of line "
                                 f"with the other ranks'; call load_state_dict() on every rank, or build a new "
                                 f"state on a new process group")
        if self._this_backward is not None:
            _, first, message = self._this_backward
            raise first(f"{where}: step {step}: this bucket was not reduced, an earlier bucket of the step "
                        f"failed on every rank ({first.__name__}: {message})")
