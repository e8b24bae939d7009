"""gradcomp.cost_model and gradcomp._C.predict_allreduce / codec_speed: the C++ cost model from Python, with
exact values where the alpha-beta formulas give them, and the codec-bound diagnosis that names the codec
that would pay."""

import math

import pytest

import gradcomp
from gradcomp import _C, cost_model
from gradcomp.diagnose import codec_bound, diagnose, diagnose_summary, summary_alternatives
from gradcomp.reproduce.metrics import LINK_SPECS, Run, model_measured_steps


def test_ring_wire_time_is_the_alpha_beta_formula():
    n = 1 << 20   # fp32 ring on 4 nodes: 2 (P-1)/P x 4n bytes at 1 GB/s
    p = _C.predict_allreduce("none", n, 4, "inter=1GB/0us", algorithm="ring")
    assert p["algorithm"] == "ring"
    assert p["wire_seconds"] == pytest.approx(2 * 3 / 4 * 4 * n / 1e9, rel=1e-12)
    assert p["codec_seconds"] == 0.0
    # 2 nodes at 1 Gbit/s (125 MB/s) and 50 us a message: 4n / 125e6 + 2 messages of 50 us.
    two = _C.predict_allreduce("none", 2_000_000, 2, "inter=1gbit/50us", algorithm="ring")
    assert two["wire_seconds"] == pytest.approx(8e6 / 125e6 + 2 * 50e-6, rel=1e-12)


def test_codec_work_overlap_and_efficiency_follow_the_formula():
    # int8 ring on 4 nodes: every element encoded once, 7 quarter-segments decoded (3 hops, 3 gathers, own).
    p = _C.predict_allreduce("int8", 4000, 4, "inter=1GB", algorithm="ring", error_feedback="ef",
                             encode_seconds_per_element=1e-9, decode_seconds_per_element=2e-9,
                             compute_seconds=1e-5, overlap=0.5)
    assert p["codec_seconds"] == pytest.approx(4000e-9 + 7000 * 2e-9, rel=1e-12)
    assert p["allreduce_seconds"] == pytest.approx(p["wire_seconds"] + p["codec_seconds"], rel=1e-12)
    assert p["exposed_seconds"] == pytest.approx(p["allreduce_seconds"] - 0.5e-5, rel=1e-12)
    assert p["efficiency"] == pytest.approx(1e-5 / (1e-5 + p["exposed_seconds"]), rel=1e-12)


def test_auto_picks_the_carrier_and_bad_input_is_named():
    assert _C.predict_allreduce("topk:ratio=0.01", 1 << 20, 8, "inter=10gbit/50us")["algorithm"] == "allgather"
    with pytest.raises(gradcomp.InvalidArgument, match="allgather"):
        _C.predict_allreduce("topk:ratio=0.01", 1 << 20, 8, "inter=10gbit", algorithm="ring")
    with pytest.raises(gradcomp.InvalidArgument, match="'fast' is not a number with a unit"):
        _C.predict_allreduce("none", 100, 2, "inter=fast")
    with pytest.raises(gradcomp.InvalidArgument, match="nodes must be in"):
        _C.predict_allreduce("none", 100, 0, "inter=1gbit")
    with pytest.raises(gradcomp.InvalidArgument, match="elements must be >= 1"):
        _C.predict_allreduce("none", 0, 2, "inter=1gbit")
    with pytest.raises(gradcomp.InvalidArgument, match="compute_seconds"):
        _C.predict_allreduce("none", 100, 2, "inter=1gbit", compute_seconds=math.nan)
    with pytest.raises(gradcomp.InvalidArgument, match="overlap must be in"):
        _C.predict_allreduce("none", 100, 2, "inter=1gbit", overlap=2.0)
    with pytest.raises(gradcomp.InvalidArgument, match="n must be in"):
        _C.codec_speed("int8", n=10)


def test_codec_speed_is_measured_for_lossy_codecs_and_zero_for_fp32():
    enc, dec = cost_model.codec_speed("int8", "ef")
    assert 0 < enc < 1e-6 and 0 < dec < 1e-6      # under a microsecond per element on any CPU
    assert cost_model.codec_speed("none") == (0.0, 0.0)
    assert cost_model.codec_speed("int8", "ef") == (enc, dec)   # measured once per process


def test_the_rotated_ring_is_charged_its_unrotated_hops_and_its_rotations():
    # The compressed ring sums a rotate=hadamard codec in the rotated domain: 4 ranks, 4000 elements, each
    # rank encodes 4000 and decodes 7000 with the codec less its rotation and rotates 2 x 4000 itself
    # (3 x 4000 with ef). Without the unrotated speeds, the rotated codec's are charged (as before).
    speeds = dict(encode_seconds_per_element=5e-9, decode_seconds_per_element=6e-9,
                  unrotated_encode_seconds_per_element=1e-9, unrotated_decode_seconds_per_element=2e-9,
                  rotate_seconds_per_element=3e-9)
    for ef, rotations in (("none", 2), ("ef", 3)):
        p = _C.predict_allreduce("int4:rotate=hadamard", 4000, 4, "inter=1GB", algorithm="ring", error_feedback=ef,
                                 **speeds)
        assert p["codec_seconds"] == pytest.approx(4000e-9 + 7000 * 2e-9 + rotations * 4000 * 3e-9, rel=1e-12)
    old = _C.predict_allreduce("int4:rotate=hadamard", 4000, 4, "inter=1GB", algorithm="ring",
                               encode_seconds_per_element=5e-9, decode_seconds_per_element=6e-9)
    assert old["codec_seconds"] == pytest.approx(4000 * 5e-9 + 7000 * 6e-9, rel=1e-12)
    with pytest.raises(gradcomp.InvalidArgument, match="finite and >= 0"):
        _C.predict_allreduce("int4", 4000, 4, "inter=1GB", rotate_seconds_per_element=-1.0)
    measured = cost_model.codec_speeds("int4:rotate=hadamard")
    assert measured["rotate"] > 0 and measured["unrotated_encode"] > 0 and measured["unrotated_decode"] > 0
    assert cost_model.codec_speeds("int4")["rotate"] == 0.0


def test_step_and_bucket_traffic_add_up():
    assert cost_model.step_ms(10.0, 4.0, 3.0, 0.5) == 10.0          # fully hidden
    assert cost_model.step_ms(10.0, 1.0, 3.0, 0.5) == pytest.approx(12.5)
    # A bucket half kept exact: the exact half rides an fp32 ring, the other half the codec's algorithm.
    bucket = [cost_model.BucketTraffic(2000, 1000)]
    wire, work = cost_model.wire_and_codec_ms("int8", bucket, 4, "inter=1GB/0us", algorithm="ring",
                                              measure_codec=False)
    exact = _C.predict_allreduce("none", 1000, 4, "inter=1GB/0us", algorithm="ring")["wire_seconds"]
    coded = _C.predict_allreduce("int8", 1000, 4, "inter=1GB/0us", algorithm="ring", error_feedback="ef")
    assert wire == pytest.approx(1e3 * (exact + coded["wire_seconds"]), rel=1e-12) and work == 0.0


def test_alternatives_rank_codecs_by_the_link():
    buckets = [cost_model.BucketTraffic(1 << 20, 1 << 20)]
    slow = cost_model.alternatives(buckets, 8, "inter=100mbit/50us", 1.0, 0.0)
    fast = cost_model.alternatives(buckets, 8, "inter=10000GB/0us", 1.0, 0.0)
    assert [a.step_ms for a in slow] == sorted(a.step_ms for a in slow)
    assert {a.codec for a in slow} == set(cost_model.CANDIDATE_CODECS)
    assert slow[-1].codec == "none"      # 4 MB of fp32 at 100 Mbit/s: every codec pays
    assert fast[0].codec == "none"       # a link this fast: any codec work costs more than it saves
    with pytest.raises(gradcomp.InvalidArgument, match="bogus"):
        cost_model.alternatives(buckets, 8, "inter=1gbit", 1.0, 0.0, ["bogus"])


def test_effective_link_is_the_measured_rate():
    link = cost_model.effective_link(2e6, 0.5)   # 4 MB/s
    assert _C.predict_allreduce("none", 1000, 2, link, algorithm="ring")["wire_seconds"] == pytest.approx(4000 / 4e6)
    assert cost_model.effective_link(0, 1.0) is None and cost_model.effective_link(10, 0.0) is None


def test_a_codec_bound_step_names_the_codec_that_pays():
    assert codec_bound(1.0, 4.0, 2.5) and not codec_bound(1.0, 4.0, 1.0) and not codec_bound(10.0, 2.0, 2.0)
    d = diagnose(1.0, 4.0, 4.0, codec_ms=2.5, codec="topk:ratio=0.01",
                 alternatives=[("topk:ratio=0.01", 5.0), ("none", 3.0), ("int8", 4.0)])
    assert d.bottleneck == "codec"
    assert d.knob == "switch to codec none (3 ms a step against 5 ms with topk:ratio=0.01)"
    assert "modelled step per codec on this link: none 3 ms, int8 4 ms, topk:ratio=0.01 5 ms" in d.evidence
    kept = diagnose(1.0, 4.0, 4.0, codec_ms=2.5, codec="int8", alternatives=[("int8", 2.0), ("none", 3.0)])
    assert kept.knob.startswith("int8 is already the fastest codec")


def test_a_latency_bound_single_bucket_is_told_to_change_algorithm():
    many = diagnose(1.0, 4.0, 4.0, wire_ms_slow_link=4.0, wire_ms_fast_link=2.0, buckets=3)
    one = diagnose(1.0, 4.0, 4.0, wire_ms_slow_link=4.0, wire_ms_fast_link=2.0, buckets=1)
    assert many.knob == "raise bucket_mb (fewer, larger messages)"
    assert one.bottleneck == "latency" and one.knob.startswith("the gradient is one bucket already")


def test_a_codec_bound_harness_summary_is_compared_with_the_candidates():
    # A run whose codec costs most of its (fast, modelled) communication: none pays on a 10000 GB/s link.
    summary = {"compute_ms": 1.0, "comm_ms": 3.0, "exposed_ms": 3.0, "encode_ms": 1.5, "decode_ms": 1.0,
               "backward_ms": 0.0, "overlap": False, "workers": 8, "ranks_per_node": 1, "codec": "int8",
               "bucket_elements": [1 << 18],
               "model_step_ms[inter=10000GB/0us]": 4.0, "model_step_ms[inter=1gbit/50us]": 20.0}
    found = summary_alternatives(summary, "10000GB")
    assert found[0][0] == "none" and {c for c, _ in found} == set(cost_model.CANDIDATE_CODECS)
    d = diagnose_summary(summary, slow="10000GB", fast="1gbit")
    assert d.bottleneck == "codec" and d.knob.startswith("switch to codec none"), d.knob
    # Summaries written before the harness recorded its buckets keep the pointer to `gradcomp model`.
    old = {k: v for k, v in summary.items() if k != "bucket_elements"}
    assert "gradcomp model" in diagnose_summary(old, slow="10000GB", fast="1gbit").knob


def test_pytorch_runs_are_modelled_from_their_step_times_and_bytes():
    run = Run(steps=[0, 1], loss=[1.0, 0.9], bytes_sent=[8e6, 4e6])
    model_measured_steps(run, [0.010, 0.020], world=2)
    # 2 ranks: one rank sends 8 MB on a ring = an all-reduce of 2M fp32; 1 Gbit/s and 2 messages of 50 us.
    assert LINK_SPECS["1gbit"] == "inter=1gbit/50us"
    assert run.step_ms["1gbit"] == pytest.approx([10.0 + 64.0 + 0.1, 20.0 + 32.0 + 0.1], rel=1e-9)
    assert run.step_ms["10gbit"] == pytest.approx([10.0 + 6.4 + 0.1, 20.0 + 3.2 + 0.1], rel=1e-9)
    single = Run(steps=[0], loss=[1.0], bytes_sent=[0.0])
    model_measured_steps(single, [0.01], world=1)   # one process: nothing to model
    assert single.step_ms == {}
