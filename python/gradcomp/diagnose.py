"""What a practitioner acts on, from one step's times: the communication fraction, the share of it left
exposed after overlap, the scaling efficiency, and the bottleneck with the knob to turn.

The rule of thumb of the field: record per step T_compute, T_comm, the bytes and the fraction of the step
spent communicating; above about 30 % communication needs work. Which work depends on why it is slow:

  latency-bound    the wire time barely falls when the link gets 10x faster: many small messages
                   (raise bucket_mb so fewer, larger buckets go out);
  bandwidth-bound  the wire time falls with the link's rate: bytes dominate (compress, or compress harder);
  codec-bound      encode + decode take at least half of the exposed communication: the codec costs more
                   than the bytes it saves at this link speed. Given the cost model's step time for other
                   codecs on the same link (gradcomp.cost_model.alternatives), it names the one that pays;
                   without them it points to `gradcomp model --codec ...`, which predicts each;
  poor overlap     most of the communication is exposed although backward is long enough to hide it
                   (check that overlap is on and buckets launch as gradients become ready).

diagnose() is pure Python on plain numbers: the C++ harness's summaries (scripts/report-training) and the
DDP hook's statistics (gradcomp.torch.DDPState.last_stats) both use it; they ask the cost model for the
alternatives only when the step is codec-bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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


def codec_bound(compute_ms: float, exposed_ms: float, codec_ms: float) -> bool:
    """Whether diagnose() calls this step codec-bound (callers fetch the alternatives only then)."""
    step = compute_ms + exposed_ms
    return step > 0 and exposed_ms / step >= NEEDS_WORK and codec_ms >= 0.5 * exposed_ms


def _codec_knob(codec: str | None, alternatives: Sequence[tuple[str, float]]) -> tuple[str, str]:
    """The knob and evidence of a codec-bound step: the modelled step of each alternative on this link,
    the current codec among them."""
    if not alternatives:
        return "use a cheaper codec or none at this link speed (gradcomp model --codec predicts each)", ""
    ranked = sorted(alternatives, key=lambda a: a[1])
    listed = ", ".join(f"{c} {ms:.3g} ms" for c, ms in ranked)
    ev = f"; modelled step per codec on this link: {listed}"
    best, best_ms = ranked[0]
    now = next((ms for c, ms in ranked if c == codec), None)
    if best == codec or now is None:
        return (f"{best} is already the fastest codec the cost model finds at this link speed: lower its cost "
                f"(more codec threads, larger buckets)", ev)
    return f"switch to codec {best} ({best_ms:.3g} ms a step against {now:.3g} ms with {codec})", ev


def diagnose(compute_ms: float, comm_ms: float, exposed_ms: float, codec_ms: float = 0.0,
             backward_ms: float = 0.0, wire_ms_fast_link: float | None = None,
             wire_ms_slow_link: float | None = None, codec: str | None = None,
             alternatives: Sequence[tuple[str, float]] = (), buckets: int | None = None) -> Diagnosis:
    """compute_ms: forward + backward + optimizer; comm_ms: all communication (codec included); exposed_ms:
    the part of it the step waited for; codec_ms: encode + decode; backward_ms: the backward pass (what
    overlap can hide communication behind); wire_ms_{slow,fast}_link: the modelled wire time on a link and
    on one 10x faster (None when unknown: then latency and bandwidth are not told apart); codec and
    alternatives: the codec in use and (codec, modelled step ms) for each candidate on this link, the one
    in use included (what a codec-bound diagnosis chooses from); buckets: how many the step sent (one
    bucket cannot be made larger: a latency-bound step then needs an algorithm with fewer messages)."""
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
        knob, more = _codec_knob(codec, alternatives)
        return Diagnosis(fraction, exposed_share, efficiency, "codec", knob,
                         ev + f"; encode + decode {codec_ms:.3g} ms" + more)
    if exposed_share > 0.8 and backward_ms >= 0.5 * comm_ms:
        return Diagnosis(fraction, exposed_share, efficiency, "overlap",
                         "overlap the all-reduce with backward (buckets launched as their gradients are ready)",
                         ev + f"; backward {backward_ms:.3g} ms could hide it")
    if wire_ms_slow_link is not None and wire_ms_fast_link is not None and wire_ms_fast_link > 0:
        speedup = wire_ms_slow_link / wire_ms_fast_link
        ev += f"; wire {wire_ms_slow_link:.3g} ms -> {wire_ms_fast_link:.3g} ms on a 10x faster link"
        if speedup < 3:
            knob = ("raise bucket_mb (fewer, larger messages)" if buckets != 1 else
                    "the gradient is one bucket already: use an algorithm with fewer messages (tree, or "
                    "hierarchical across nodes; -a auto picks by the cost model)")
            return Diagnosis(fraction, exposed_share, efficiency, "latency", knob, ev)
    return Diagnosis(fraction, exposed_share, efficiency, "bandwidth", "compress, or compress harder", ev)


def _model_key(summary: dict, link: str) -> str | None:
    return next((k for k in summary if k.startswith("model_step_ms[") and f"inter={link}" in k), None)


def modelled_step_ms(summary: dict, link: str) -> float | None:
    """A harness summary's modelled step time on the inter-node link named `link` ("1gbit"), or None."""
    key = _model_key(summary, link)
    return None if key is None else float(summary[key])


def summary_alternatives(summary: dict, link: str) -> list[tuple[str, float]]:
    """(codec, modelled step ms) on the summary's modelled link named `link`, for the run's codec and the
    cost model's candidates, from the buckets the run reduced (summaries written before gradcomp train
    recorded its buckets have none: [])."""
    key = _model_key(summary, link)
    if key is None or not summary.get("bucket_elements"):
        return []
    from . import cost_model   # the C++ extension: only a codec-bound diagnosis needs it
    links = key[len("model_step_ms["):-1]
    buckets = [cost_model.BucketTraffic(int(e), int(e)) for e in summary["bucket_elements"]]
    per_node = int(summary.get("ranks_per_node", 1))
    ranks = int(summary["workers"])
    hideable = float(summary.get("backward_ms", 0.0)) if summary.get("overlap", True) else 0.0
    codecs = list(cost_model.CANDIDATE_CODECS)
    if summary.get("codec") and summary["codec"] not in codecs:
        codecs.insert(0, summary["codec"])
    found = cost_model.alternatives(buckets, ranks // per_node, links, float(summary["compute_ms"]), hideable,
                                    codecs, ranks_per_node=per_node)
    return [(a.codec, a.step_ms) for a in found]


def diagnose_summary(summary: dict, slow: str = "1gbit", fast: str = "10gbit") -> Diagnosis:
    """A C++ harness run's summary.json, on the modelled slow link: its compute and codec times are the
    run's, the communication is the modelled step time's (the exposed share from the run itself). A
    codec-bound run is compared with the cost model's candidate codecs on that link."""
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
    alternatives = summary_alternatives(summary, slow) if codec_bound(compute, slow_ms, codec) else []
    return diagnose(compute, total, slow_ms, codec, float(summary.get("backward_ms", 0.0)),
                    wire_ms_fast_link=max(fast_ms - codec, 0.0) if fast_ms is not None else None,
                    wire_ms_slow_link=max(slow_ms - codec, 0.0), codec=summary.get("codec"),
                    alternatives=alternatives,
                    buckets=len(summary["bucket_elements"]) if summary.get("bucket_elements") else None)
