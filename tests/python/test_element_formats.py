"""The narrow element formats against an independent reference, the PyPI package ml_dtypes: every code of
OCP FP8 (E4M3, E5M2), FP6 (E2M3, E3M2), FP4 (E2M1) and the E8M0 scale, the rounding of every midpoint,
and whole tensors of mxfp8 / mxfp6 / mxfp4, nvfp4 and int4 against a NumPy transcription of each
format's definition (the OCP MX v1.0 shared-scale rule; NVFP4's two-level scaling)."""

import ml_dtypes
import numpy as np
import pytest

import gradcomp

# codec spec -> (ml_dtypes element type, largest finite magnitude, emax of the largest normal, code bits)
ELEMENTS = {
    "mxfp8": (ml_dtypes.float8_e4m3fn, 448.0, 8, 8),
    "mxfp8:elem=e5m2": (ml_dtypes.float8_e5m2, 57344.0, 15, 8),
    "mxfp6": (ml_dtypes.float6_e2m3fn, 7.5, 2, 6),
    "mxfp6:elem=e3m2": (ml_dtypes.float6_e3m2fn, 28.0, 4, 6),
    "mxfp4": (ml_dtypes.float4_e2m1fn, 6.0, 2, 4),
}
BLOCK = 32


def finite_values(dtype, bits):
    """Every finite value of the format, from its codes (ml_dtypes' own decoding)."""
    codes = np.arange(1 << bits, dtype=np.uint8)
    values = codes.view(dtype).astype(np.float32) if bits == 8 else \
        np.array([np.uint8(c).view(dtype) for c in codes], dtype=np.float32)
    return np.unique(values[np.isfinite(values)])


def reference_element(x, dtype, top):
    """RNE to the element format, saturating at +-top (ml_dtypes converts overflow to NaN or Inf)."""
    return np.clip(x.astype(np.float32), -top, top).astype(dtype).astype(np.float32)


def mx_reference(x, dtype, top, emax, block=BLOCK):
    out = np.empty_like(x)
    scales = []
    for b0 in range(0, x.size, block):
        xb = x[b0:b0 + block]
        amax = np.max(np.abs(xb))
        e = -127 if amax == 0 else max(-127, int(np.floor(np.log2(np.float64(amax)))) - emax)
        scale = np.float32(2.0 ** e)
        scales.append(scale)
        out[b0:b0 + block] = reference_element(xb / scale, dtype, top) * scale
    return out, np.array(scales, dtype=np.float32)


def scale_bytes(codec, x):
    """The E8M0 scale codes of an MX wire: section 0, right after the 48-byte header."""
    wire = codec.encode(x).wire
    return wire[48:48 + (x.size + BLOCK - 1) // BLOCK]


@pytest.mark.parametrize("spec", ELEMENTS)
def test_every_value_and_every_midpoint_rounds_as_ml_dtypes(spec):
    dtype, top, emax, bits = ELEMENTS[spec]
    values = finite_values(dtype, bits)
    positive = values[values > 0]
    # Midpoints are exact in fp32 (one more bit); the probes are fp32 before taking neighbours.
    midpoints = ((positive[:-1].astype(np.float64) + positive[1:]) / 2).astype(np.float32)
    tiny = np.float32(positive[0] / 2)  # half the smallest subnormal: a tie with 0
    zero, inf = np.float32(0), np.float32(np.inf)
    probes = np.concatenate([
        values, midpoints, np.nextafter(midpoints, zero), np.nextafter(midpoints, inf),
        [tiny, np.nextafter(tiny, inf), np.nextafter(tiny, zero), tiny / 2],
    ]).astype(np.float32)
    assert probes.dtype == np.float32 and np.all(np.nextafter(midpoints, zero) < midpoints)
    probes = np.concatenate([probes, -probes])
    # Blocks whose first element is 2^emax keep the shared scale at 2^0, so each probe is converted as is.
    per_block = BLOCK - 1
    blocks = -(-probes.size // per_block)
    x = np.zeros(blocks * BLOCK, dtype=np.float32)
    for b in range(blocks):
        chunk = probes[b * per_block:(b + 1) * per_block]
        x[b * BLOCK] = 2.0 ** emax
        x[b * BLOCK + 1:b * BLOCK + 1 + chunk.size] = chunk
    codec = gradcomp.Codec(spec)
    assert np.all(scale_bytes(codec, x) == 127)
    got = codec.decode(codec.encode(x).wire)
    want = reference_element(x, dtype, top)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0 stays -0


@pytest.mark.parametrize("spec", ELEMENTS)
def test_values_beyond_the_largest_saturate_and_are_counted(spec):
    dtype, top, emax, bits = ELEMENTS[spec]
    x = np.zeros(BLOCK, dtype=np.float32)
    # Within the scale's octave [2^emax, 2^(emax+1)) but above the largest value: clipped to it.
    x[0] = np.nextafter(np.float32(2.0 ** (emax + 1)), np.float32(0))
    x[1] = -x[0]
    codec = gradcomp.Codec(spec)
    enc = codec.encode(x)
    assert enc.saturated == 2  # both lie past the midpoint between the largest value and the next step
    got = codec.decode(enc.wire)
    assert got[0] == top and got[1] == -top


def test_e8m0_scales_are_the_ocp_shared_exponent():
    codec = gradcomp.Codec("mxfp8")
    rng = np.random.default_rng(4)
    # amax over 2^-140 .. 2^120: the floor(log2 amax) - 8 rule, clamped at 2^-127.
    exponents = rng.uniform(-140, 120, size=300)
    x = np.zeros(300 * BLOCK, dtype=np.float32)
    x[::BLOCK] = (2.0 ** exponents).astype(np.float32)
    x[x == 0] = np.float32(2.0 ** -149)
    amax = x[::BLOCK].astype(np.float64)
    want = np.float32(2.0) ** np.maximum(-127, np.floor(np.log2(amax)) - 8).astype(np.float32)
    want_codes = want.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    np.testing.assert_array_equal(scale_bytes(codec, x), want_codes)


def test_every_e8m0_scale_code_decodes_to_its_ml_dtypes_value():
    """gradcomp's decoder against ml_dtypes' E8M0: one mxfp8 block holding 256 and 1.0 (scale code 127,
    elements 256 and 1.0), its scale byte set to every code. An accepted code scales the elements by
    exactly E8M0's value (2^-127 .. 2^127, subnormal fp32 outputs included); the decoder may refuse only
    NaN (255) and the codes at which the format's largest element (448) times the scale is not finite."""
    codec = gradcomp.Codec("mxfp8")
    x = np.zeros(BLOCK, dtype=np.float32)
    x[0], x[1] = 256.0, 1.0
    wire = codec.encode(x).wire.copy()
    assert wire[48] == 127  # floor(log2 256) - 8 = 0
    accepted = []
    for code in range(256):
        wire[48] = code
        scale = np.uint8(code).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
        try:
            got = codec.decode(wire)
        except gradcomp.DecodeError:
            assert code == 255 or 448.0 * scale > np.finfo(np.float32).max, f"scale code {code} refused"
            continue
        accepted.append(code)
        assert got[1] == np.float32(scale) and got[0] == np.float32(256.0 * scale), f"scale code {code}"
        assert not np.any(got[2:]), f"scale code {code}"
    assert accepted[:246] == list(range(246))  # 448 x 2^118 is finite: every code up to 245 decodes
    assert 255 not in accepted


@pytest.mark.parametrize("spec", ELEMENTS)
@pytest.mark.parametrize("data", ["normal", "student-t", "spiked", "tiny"])
def test_whole_tensors_match_the_specification(spec, data):
    dtype, top, emax, bits = ELEMENTS[spec]
    rng = np.random.default_rng(9)
    n = 32 * 97 + 5  # a short last block
    x = {"normal": rng.standard_normal(n),
         "student-t": rng.standard_t(2.5, n),
         "spiked": rng.standard_normal(n) * np.where(rng.random(n) < 0.01, 1e4, 1.0),
         "tiny": rng.standard_normal(n) * 1e-39}[data].astype(np.float32)
    codec = gradcomp.Codec(spec)
    want, _ = mx_reference(x, dtype, top, emax)
    np.testing.assert_array_equal(codec.decode(codec.encode(x).wire), want)


def nvfp4_reference(x):
    e2m1, e4m3 = ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn
    amax = np.float32(np.max(np.abs(x)))
    t = np.float32(amax / np.float32(2688.0)) if amax > 0 else np.float32(2.0 ** -126)
    t = max(t, np.float32(2.0 ** -126))
    out = np.empty_like(x)
    for b0 in range(0, x.size, 16):
        xb = x[b0:b0 + 16]
        s = np.float32(np.max(np.abs(xb)) / np.float32(np.float32(6.0) * t))
        s = np.float32(np.clip(s, 0, 448)).astype(e4m3).astype(np.float32)
        f = np.float32(s * t)
        if f == 0:
            out[b0:b0 + 16] = 0
            continue
        out[b0:b0 + 16] = reference_element(xb / f, e2m1, 6.0) * f
    return out, t


@pytest.mark.parametrize("data", ["normal", "student-t", "spiked", "zeros"])
def test_nvfp4_matches_its_two_level_scaling(data):
    rng = np.random.default_rng(5)
    n = 16 * 211 + 9
    x = {"normal": rng.standard_normal(n),
         "student-t": rng.standard_t(2.5, n),
         "spiked": rng.standard_normal(n) * np.where(rng.random(n) < 0.01, 1e4, 1.0),
         "zeros": np.zeros(n)}[data].astype(np.float32)
    codec = gradcomp.Codec("nvfp4")
    enc = codec.encode(x)
    want, t = nvfp4_reference(x)
    assert codec.inspect(enc.wire)["param"] == int(np.float32(t).view(np.uint32))
    np.testing.assert_array_equal(codec.decode(enc.wire), want)


def test_int4_is_symmetric_round_to_nearest_even():
    rng = np.random.default_rng(6)
    x = rng.standard_normal(64 * 40 + 3).astype(np.float32)
    got = gradcomp.Codec("int4").decode(gradcomp.Codec("int4").encode(x).wire)
    want = np.empty_like(x)
    for b0 in range(0, x.size, 64):
        xb = x[b0:b0 + 64]
        scale = np.float32(np.float32(7.0) / np.max(np.abs(xb)))
        want[b0:b0 + 64] = np.clip(np.rint(xb * scale), -7, 7).astype(np.float32) * np.float32(np.float32(1.0) / scale)
    np.testing.assert_array_equal(got, want)
    # Stochastic rounding stays on the same grid: each value is a neighbour of the nearest one.
    sr = gradcomp.Codec("int4:rounding=stochastic")
    got_sr = sr.decode(sr.encode(x, seed=1).wire)
    step = np.repeat([np.max(np.abs(x[b0:b0 + 64])) / 7 for b0 in range(0, x.size, 64)], 64)[:x.size]
    assert np.all(np.abs(got_sr - want) <= step * 1.0001)
