"""gradcomp.diagnose: the communication fraction, exposed share, scaling efficiency and the bottleneck
named from a step's times, with exact values on crafted steps."""

import pytest

from gradcomp.diagnose import NEEDS_WORK, diagnose, diagnose_summary


def test_fractions_are_exact():
    d = diagnose(compute_ms=6.0, comm_ms=8.0, exposed_ms=4.0)
    assert d.comm_fraction == pytest.approx(0.4)       # 4 / (6 + 4)
    assert d.efficiency == pytest.approx(0.6)
    assert d.exposed_share == pytest.approx(0.5)       # 4 of 8 exposed


def test_each_bottleneck_is_named_with_its_knob():
    assert NEEDS_WORK == 0.30
    compute = diagnose(10.0, 5.0, 2.0)                 # 2 / 12 = 17 % < 30 %
    assert compute.bottleneck == "compute" and "nothing to gain" in compute.knob
    codec = diagnose(1.0, 4.0, 4.0, codec_ms=2.5)      # codec >= half the exposed time
    assert codec.bottleneck == "codec" and "cheaper codec" in codec.knob
    overlap = diagnose(4.0, 4.0, 4.0, backward_ms=3.0)  # all exposed, backward could hide most of it
    assert overlap.bottleneck == "overlap"
    latency = diagnose(1.0, 4.0, 4.0, wire_ms_slow_link=4.0, wire_ms_fast_link=2.0)   # 2x from a 10x link
    assert latency.bottleneck == "latency" and "bucket_mb" in latency.knob
    bandwidth = diagnose(1.0, 4.0, 4.0, wire_ms_slow_link=4.0, wire_ms_fast_link=0.5)  # 8x
    assert bandwidth.bottleneck == "bandwidth" and "compress" in bandwidth.knob
    assert "communication 80 % of the step" in bandwidth.sentence()


def test_bad_times_are_refused_by_name():
    with pytest.raises(ValueError, match="exposed_ms must be a finite time >= 0"):
        diagnose(1.0, 1.0, float("nan"))
    with pytest.raises(ValueError, match="compute_ms"):
        diagnose(-1.0, 1.0, 1.0)


def test_a_harness_summary_is_diagnosed_on_its_slowest_modelled_link():
    summary = {"compute_ms": 1.0, "comm_ms": 2.0, "exposed_ms": 2.0, "encode_ms": 0.0, "decode_ms": 0.0,
               "backward_ms": 0.1, "model_step_ms[inter=1gbit/50us]": 9.0, "model_step_ms[inter=10gbit/50us]": 2.0}
    d = diagnose_summary(summary)
    assert d.comm_fraction == pytest.approx(8.0 / 9.0)
    assert d.bottleneck == "bandwidth"                 # wire 8 ms -> 1 ms on the 10x faster link
    summary["model_step_ms[inter=10gbit/50us]"] = 7.0  # 8 ms -> 6 ms: latency
    assert diagnose_summary(summary).bottleneck == "latency"
