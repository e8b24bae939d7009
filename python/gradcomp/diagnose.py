"""What a practitioner acts on, from one step's times: the communication fraction, the share of it left
exposed after overlap, the scaling efficiency, and the bottleneck with the knob to turn.

The rule of thumb of the field: record per step T_compute, T_comm, the bytes and the fraction of the step
spent communicating; above about 30 % communication needs work. Which work depends on why it is slow:

  latency-bound    the wire time barely falls when the link gets 10x faster: many small messages
                   (raise bucket_mb so fewer, larger buckets go out);
  bandwidth-bound  the wire time falls with the link's rate: bytes dominate (compress, or compress harder);
  codec-bound      encode + decode take at least half of the exposed communication: the codec costs more
                   than the bytes it saves at this link speed (a cheaper codec, or none: `gradcomp model
                   --codec ...` predicts each one's step time);
  poor overlap     most of the communication is exposed although backward is long enough to hide it
                   (check that overlap is on and buckets launch as gradients become ready).

Pure Python on plain numbers: the C++ harness's summaries (scripts/report-training) and the DDP hook's
statistics (gradcomp.torch.DDPState.last_stats) both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

NEEDS_WORK = 0.30   # communication above this fraction of the step needs work


@dataclass(frozen=True)
class Diagnosis:
    comm_fraction: float    # exposed communication / step time
    exposed_share: float    # exposed / total communication time (1: nothing hidden)
    efficiency: float       # compute / step time (the scaling efficiency)
    bottleneck: str         # compute | latency | bandwidth | codec | overlap
    knob: str               # what to change
    evidence: str           # the numbers behind it

    def sentence(self) -> str:
        return (f"communication {100 * self.comm_fraction:.0f} % of the step ({100 * self.exposed_share:.0f} % "
                f"of it exposed), scaling efficiency {100 * self.efficiency:.0f} %: {self.bottleneck}-bound; "
                f"{self.knob} ({self.evidence})")


def diagnose(compute_ms: float, comm_ms: float, exposed_ms: float, codec_ms: float = 0.0,
             backward_ms: float = 0.0, wire_ms_fast_link: float | None = None,
             wire_ms_slow_link: float | None = None) -> Diagnosis:
    """compute_ms: forward + backward + optimizer; comm_ms: all communication (codec included); exposed_ms:
    the part of it the step waited for; codec_ms: encode + decode; backward_ms: the backward pass (what
    overlap can hide communication behind); wire_ms_{slow,fast}_link: the modelled wire time on a link and
    on one 10x faster (None when unknown: then latency and bandwidth are not told apart)."""
    for name, v in (("compute_ms", compute_ms), ("comm_ms", comm_ms), ("exposed_ms", exposed_ms),
                    ("codec_ms", codec_ms), ("backward_ms", backward_ms)):
        if not v >= 0:
            raise ValueError(f"diagnose: {name} must be a finite time >= 0, got {v}")
    step = compute_ms + exposed_ms
    fraction = exposed_ms / step if step > 0 else 0.0
    exposed_share = min(1.0, exposed_ms / comm_ms) if comm_ms > 0 else 0.0   # waits can exceed the transfer
    efficiency = compute_ms / step if step > 0 else 1.0
    ev = f"compute {compute_ms:.3g} ms, communication {comm_ms:.3g} ms of which {exposed_ms:.3g} ms exposed"
    if fraction < NEEDS_WORK:
        return Diagnosis(fraction, exposed_share, efficiency, "compute",
                         f"communication is under {100 * NEEDS_WORK:.0f} % of the step: nothing to gain", ev)
    if codec_ms >= 0.5 * exposed_ms:
        return Diagnosis(fraction, exposed_share, efficiency, "codec",
                         "use a cheaper codec or none at this link speed (gradcomp model --codec predicts each)",
                         ev + f"; encode + decode {codec_ms:.3g} ms")
    if exposed_share > 0.8 and backward_ms >= 0.5 * comm_ms:
        return Diagnosis(fraction, exposed_share, efficiency, "overlap",
                         "overlap the all-reduce with backward (buckets launched as their gradients are ready)",
                         ev + f"; backward {backward_ms:.3g} ms could hide it")
    if wire_ms_slow_link is not None and wire_ms_fast_link is not None and wire_ms_fast_link > 0:
        speedup = wire_ms_slow_link / wire_ms_fast_link
        ev += f"; wire {wire_ms_slow_link:.3g} ms -> {wire_ms_fast_link:.3g} ms on a 10x faster link"
        if speedup < 3:
            return Diagnosis(fraction, exposed_share, efficiency, "latency",
                             "raise bucket_mb (fewer, larger messages)", ev)
    return Diagnosis(fraction, exposed_share, efficiency, "bandwidth", "compress, or compress harder", ev)


def modelled_step_ms(summary: dict, link: str) -> float | None:
    """A harness summary's modelled step time on the inter-node link named `link` ("1gbit"), or None."""
    key = next((k for k in summary if k.startswith("model_step_ms[") and f"inter={link}" in k), None)
    return None if key is None else float(summary[key])


def diagnose_summary(summary: dict, slow: str = "1gbit", fast: str = "10gbit") -> Diagnosis:
    """A C++ harness run's summary.json, on the modelled slow link: its compute and codec times are the
    run's, the communication is the modelled step time's (the exposed share from the run itself)."""
    compute = float(summary["compute_ms"])
    codec = float(summary.get("encode_ms", 0.0)) + float(summary.get("decode_ms", 0.0))

    def modelled(link):
        step = modelled_step_ms(summary, link)
        return None if step is None else max(0.0, step - compute)

    slow_ms, fast_ms = modelled(slow), modelled(fast)
    if slow_ms is None:   # no modelled link: the run's own (in-process) times
        return diagnose(compute, float(summary["comm_ms"]), float(summary["exposed_ms"]), codec,
                        float(summary.get("backward_ms", 0.0)))
    # The modelled time already hides what overlap can; the exposed share is the run's own.
    comm = float(summary["comm_ms"])
    share = min(1.0, float(summary["exposed_ms"]) / comm) if comm > 0 else 1.0
    total = slow_ms / share if share > 0 else slow_ms
    return diagnose(compute, total, slow_ms, codec, float(summary.get("backward_ms", 0.0)),
                    wire_ms_fast_link=max(fast_ms - codec, 0.0) if fast_ms is not None else None,
                    wire_ms_slow_link=max(slow_ms - codec, 0.0))
