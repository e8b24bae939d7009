"""gradcomp's codecs and error feedback from Python: the same bytes as the C++ command line, zero-copy
DLPack arrays (numpy, torch), typed errors carrying the C++ message, and no silent conversions."""

import pickle
import subprocess

import warnings

import numpy as np
import pytest
import torch

import gradcomp

# Every codec with its parameters as the C++ codec suite lists them (tests/compressors/codec_test_util.h).
CONFIGURATIONS = [
    "none", "fp16", "fp16:prescale=0.125", "bf16", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3:block=7", "int8",
    "int8:rounding=stochastic,block=100", "qsgd", "qsgd:bits=2", "qsgd:bits=8,block=33", "terngrad", "topk",
    "topk:ratio=0.1,values=fp16", "randomk:ratio=0.05", "randomk:k=3,values=fp16,unbiased=true",
    "randomk:ratio=0.25,unbiased=true", "threshold:ratio=0.05", "sign", "sign:block=9", "onebit",
    "onebit:block=13", "mxfp8", "mxfp8:elem=e5m2", "mxfp6", "mxfp6:elem=e3m2", "mxfp4", "mxfp4:block=24", "nvfp4",
    "int4", "int4:rounding=stochastic,block=20", "int4:rotate=hadamard", "int8:rotate=hadamard,rblock=64",
    "mxfp4:rotate=hadamard,rblock=1024", "nvfp4:rotate=hadamard", "sign:rotate=hadamard,rblock=32",
    "qsgd:bits=2,rotate=hadamard", "fp8-e4m3:rotate=hadamard,rblock=128", "int8:rounding=stochastic,rounding_bits=8",
    "qsgd:bits=3,rounding_bits=8", "terngrad:block=100,rounding_bits=8",
    "int4:rounding=stochastic,rounding_bits=8,rotate=hadamard",
]


def normal(n, seed=3, sigma=1.0):
    return (np.random.default_rng(seed).standard_normal(n) * sigma).astype(np.float32)


def test_codecs_lists_every_registered_codec():
    assert gradcomp.codecs() == ["none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "qsgd", "terngrad", "topk",
                                 "randomk", "threshold", "sign", "onebit", "mxfp8", "mxfp6", "mxfp4", "nvfp4",
                                 "int4"]


@pytest.mark.parametrize("name", gradcomp.codecs())
def test_every_canonical_spec_parses_back_to_itself(name):
    # The canonical spec is what configs, checkpoints and the cost model hand back to the parser (the
    # sparse codecs once named both k=0 and ratio, which the parser refuses).
    for spec in (name, name + ":k=100") if name in ("topk", "randomk", "threshold") else (name,):
        canonical = gradcomp.Codec(spec).canonical_spec
        assert gradcomp.Codec(canonical).canonical_spec == canonical


@pytest.mark.parametrize("spec", CONFIGURATIONS)
def test_python_writes_the_bytes_the_cli_writes(spec, tmp_path, gradcomp_cli):
    x = normal(4099, seed=11)
    residual = normal(4099, seed=12, sigma=0.01)
    x.tofile(tmp_path / "x.f32")
    residual.tofile(tmp_path / "r.f32")
    ctx = dict(seed=5, rank=2, step=7, tensor_id=3)
    cli_ctx = ["--seed", "5", "--rank", "2", "--step", "7", "--tensor", "3"]
    subprocess.run([gradcomp_cli, "encode", "--codec", spec, "--in", tmp_path / "x.f32", "--out", tmp_path / "w",
                    *cli_ctx], check=True, capture_output=True)
    subprocess.run([gradcomp_cli, "encode", "--codec", spec, "--in", tmp_path / "x.f32", "--out", tmp_path / "we",
                    "--residual-in", tmp_path / "r.f32", "--residual-out", tmp_path / "r2.f32", *cli_ctx],
                   check=True, capture_output=True)
    subprocess.run([gradcomp_cli, "decode", "--in", tmp_path / "w", "--out", tmp_path / "y.f32"], check=True,
                   capture_output=True)
    codec = gradcomp.Codec(spec)
    enc = codec.encode(x, **ctx)
    assert enc.wire.tobytes() == (tmp_path / "w").read_bytes()
    r = residual.copy()
    enc_ef = codec.encode_with_residual(x, r, **ctx)
    assert enc_ef.wire.tobytes() == (tmp_path / "we").read_bytes()
    assert r.tobytes() == (tmp_path / "r2.f32").read_bytes()
    assert codec.decode(enc.wire).tobytes() == (tmp_path / "y.f32").read_bytes()
    # A torch tensor in gives the same bytes, in a torch tensor out.
    t = codec.encode(torch.from_numpy(x), **ctx)
    assert isinstance(t.wire, torch.Tensor) and t.wire.numpy().tobytes() == enc.wire.tobytes()


def test_arrays_cross_without_copies():
    codec = gradcomp.Codec("int8:block=256")
    x = torch.from_numpy(normal(1 << 16))
    out = torch.empty(codec.max_encoded_bytes(x.numel()), dtype=torch.uint8)
    enc = codec.encode(x, out)
    assert enc.wire.data_ptr() == out.data_ptr()  # the wire is a view of the caller's buffer
    y = torch.full_like(x, 7.0)
    ptr = y.data_ptr()
    codec.decode(enc.wire, y)
    assert y.data_ptr() == ptr and not torch.equal(y, torch.full_like(x, 7.0))
    # numpy views of torch memory and back: still the same memory
    yn = y.numpy()
    codec.decode(enc.wire, yn, accumulate=True)
    assert torch.equal(y, torch.from_numpy(yn))


def test_decode_accumulate_equals_decode_then_add():
    codec = gradcomp.Codec("qsgd:bits=4")
    x = normal(1000)
    enc = codec.encode(x, seed=1)
    base = normal(1000, seed=9)
    acc = base.copy()
    codec.decode(enc.wire, acc, accumulate=True)
    assert np.array_equal(acc, base + codec.decode(enc.wire))


def test_no_silent_conversion_of_wrong_dtypes_or_layouts():
    codec = gradcomp.Codec("fp16")
    with pytest.raises(TypeError):
        codec.encode(np.zeros(10, dtype=np.float64))  # would otherwise be copied to float32
    with pytest.raises(TypeError):
        codec.encode(np.zeros(20, dtype=np.float32)[::2])  # strided
    enc = codec.encode(np.ones(10, dtype=np.float32))
    with pytest.raises(TypeError):
        codec.decode(enc.wire, np.zeros(10, dtype=np.float64))  # an in-place decode into a copy would be lost


def test_errors_are_typed_and_carry_the_cpp_message():
    with pytest.raises(gradcomp.InvalidArgument, match="unknown codec 'int9'.*known: none, fp16"):
        gradcomp.Codec("int9")
    with pytest.raises(ValueError, match="'int8' has no parameter 'blok'"):  # InvalidArgument is a ValueError too
        gradcomp.Codec("int8:blok=3")
    codec = gradcomp.Codec("int8")
    x = normal(300)
    x[123] = np.inf
    with pytest.raises(gradcomp.NonFiniteError) as e:
        codec.encode(x, tensor_id=4)
    assert e.value.index == 123 and e.value.tensor_id == 4 and isinstance(e.value, ArithmeticError)
    with pytest.raises(gradcomp.InvalidArgument, match="wire"):
        codec.encode(normal(300), np.empty(10, dtype=np.uint8))  # too small for 300 values
    assert issubclass(gradcomp.TimeoutError, TimeoutError) and issubclass(gradcomp.Error, RuntimeError)


def test_a_corrupted_payload_is_a_decode_error_and_nothing_is_written():
    codec = gradcomp.Codec("int8")
    wire = codec.encode(normal(1000)).wire.copy()
    out = np.full(1000, 5.0, dtype=np.float32)
    bad = wire.copy()
    bad[10] ^= 0xFF  # the header's checksum no longer matches
    with pytest.raises(gradcomp.DecodeError):
        codec.decode(bad, out)
    assert np.all(out == 5.0)
    with pytest.raises(gradcomp.DecodeError):
        codec.decode(wire[:100], out)  # truncated
    assert np.all(out == 5.0)
    with pytest.raises(gradcomp.DecodeError, match="fp16|codec"):
        gradcomp.Codec("fp16").decode(wire, out)  # another codec's payload
    with pytest.raises(gradcomp.DecodeError, match="1000 elements, output has 999"):
        codec.decode(wire, np.zeros(999, dtype=np.float32))


def test_inspect_reads_the_validated_header():
    codec = gradcomp.Codec("topk:ratio=0.1,values=fp16")
    enc = codec.encode(normal(1000))
    h = codec.inspect(enc.wire)
    assert (h["codec"], h["num_elements"], h["count"], h["wire_bytes"]) == ("topk", 1000, 100, enc.wire_bytes)
    assert gradcomp.inspect_any(enc.wire)["codec"] == "topk"
    y = np.empty(1000, dtype=np.float32)
    gradcomp.decode_any(enc.wire, y)
    assert np.array_equal(y, codec.decode(enc.wire))


def test_description_of_a_codec():
    codec = gradcomp.Codec("int8:block=0256")
    assert codec.canonical_spec == "int8:block=256,rounding=nearest" and codec.name == "int8"
    assert codec.traits["reencodable"] and not codec.traits["sparse"]
    assert gradcomp.Codec("topk:ratio=0.01").sparse_entries(10000) == 100
    assert pickle.loads(pickle.dumps(codec)).canonical_spec == codec.canonical_spec


def test_error_feedback_policy_keeps_the_invariant_and_its_state():
    codec = gradcomp.Codec("int8")
    ef = gradcomp.ErrorFeedback("ef")
    g = normal(2048, seed=1)
    out = np.empty(codec.max_encoded_bytes(g.size), dtype=np.uint8)
    outcome = ef.compress_into(codec._c, g, out, tensor_id=9)
    wire = out[:outcome.encoded.wire_bytes]
    e = ef.state(9)
    # ef: g + e_before (zero) == D(wire) + e_after, up to one fp32 rounding of the subtraction
    assert np.allclose(g, codec.decode(wire) + e, rtol=0, atol=1e-6)
    assert ef.tensor_ids() == [9] and ef.num_buffers == 1
    # save / load and pickle carry the state exactly
    restored = gradcomp.ErrorFeedback("ef")
    restored.load(ef.save())
    assert np.array_equal(restored.state(9), e)
    assert np.array_equal(pickle.loads(pickle.dumps(ef)).state(9), e)
    with pytest.raises(gradcomp.InvalidArgument):
        gradcomp.ErrorFeedback("ef21").load(ef.save())  # another policy's state
    # set_state replaces it, and refuses non-finite values
    ef.set_state(9, [np.zeros(2048, dtype=np.float32)])
    assert not ef.state(9).any()
    bad = np.zeros(2048, dtype=np.float32)
    bad[5] = np.nan
    with pytest.raises(gradcomp.InvalidArgument, match="index 5"):
        ef.set_state(9, [bad])
    # a non-finite gradient leaves the state untouched
    before = ef.state(9)
    g[17] = np.nan
    with pytest.raises(gradcomp.NonFiniteError):
        ef.compress_into(codec._c, g, out, tensor_id=9)
    assert np.array_equal(ef.state(9), before)


def test_error_feedback_scaled_for_an_unbiased_codec():
    # qsgd at 4 bits on 512-value blocks: omega = 512 / (4 x 7^2) >= 1, not contractive; plain ef warns once,
    # ef:scale=auto sends C(c / (1 + omega)) and keeps the invariant g + e_before == D(wire) + e_after.
    codec = gradcomp.Codec("qsgd")
    assert codec.variance_bound(4096) == pytest.approx(512 / (4 * 49), rel=1e-12)
    assert gradcomp.Codec("topk:ratio=0.01").variance_bound(4096) == 0.0
    g = normal(4096, seed=3)
    out = np.empty(codec.max_encoded_bytes(g.size), dtype=np.uint8)
    with pytest.warns(RuntimeWarning, match="omega = 2.61"):
        gradcomp.ErrorFeedback("ef").compress_into(codec._c, g, out, tensor_id=1)
    scaled = gradcomp.ErrorFeedback("ef:scale=auto")
    assert "scale=auto" in scaled.canonical_spec
    outcome = scaled.compress_into(codec._c, g, out, tensor_id=1)
    e = scaled.state(1)
    assert np.allclose(g, codec.decode(out[:outcome.encoded.wire_bytes]) + e, rtol=0, atol=1e-5)
    # contractive in expectation: ||e_after||^2 <= (1 - 1 / (1 + omega)) ||g||^2 (one draw, with margin)
    assert float(e @ e) < (1 - 1 / (1 + codec.variance_bound(4096))) * float(g @ g) * 1.2
    with pytest.raises(gradcomp.InvalidArgument):
        gradcomp.ErrorFeedback("ef:scale=0.5")


def test_the_hooks_scaled_error_feedback_is_the_policys_step():
    # The DDP hook and the FSDP reduce-scatter encode through encode_parts_into. With scale_auto, a part
    # whose codec is not contractive (qsgd at 4 bits: omega 2.61 on 512-value blocks) sends exactly the
    # bytes of ErrorFeedback("ef:scale=auto") and keeps its residual; a contractive codec (int8, omega 0)
    # takes plain ef's fused step, bit for bit.
    from gradcomp import _C
    g, r_in = normal(4096, seed=5), normal(4096, seed=6) * 0.1
    exact = gradcomp.Codec("none")
    parts = np.array([[0, g.size, 7, 0]], dtype=np.int64)
    for spec, omega in (("qsgd", 512 / (4 * 49)), ("int8", 0.0)):
        codec = gradcomp.Codec(spec)
        assert codec.variance_bound(g.size) == pytest.approx(omega, rel=1e-12)
        sent = {}
        for scale_auto in (False, True):
            out = np.zeros(32 + codec.max_encoded_bytes(g.size), dtype=np.uint8)
            r_out = np.full_like(r_in, np.nan)
            code, _, end, _, _ = _C.encode_parts_into(codec._c, exact._c, g, parts, out, 32, r_in, r_out,
                                                      seed=11, rank=1, step=2, scale_auto=scale_auto)
            assert code == 0
            sent[scale_auto] = (out[32:end], r_out)
        for policy_spec, scale_auto in (("ef", False), ("ef:scale=auto", True)):
            policy = gradcomp.ErrorFeedback(policy_spec)
            policy.set_state(7, [r_in])
            out = np.zeros(codec.max_encoded_bytes(g.size), dtype=np.uint8)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # plain ef with qsgd warns (tested above)
                n = policy.compress_into(codec._c, g, out, seed=11, rank=1, step=2, tensor_id=7).encoded.wire_bytes
            wire, residual = sent[scale_auto]
            assert np.array_equal(out[:n], wire[:n]) and np.all(wire[n:] == 0), (spec, policy_spec)
            assert np.array_equal(policy.state(7), residual), (spec, policy_spec)
        # scaling changes qsgd's bytes (a third of c is sent), never int8's
        assert np.array_equal(sent[False][0], sent[True][0]) == (omega < 1), spec


def test_parts_carry_dgcs_warm_up_entries_both_ways():
    # DGC's warm-up in the DDP hook: encode_parts_into sends `entries` values of a sparse part (instead of
    # the codec's k) and decode_parts_into bounds each wire by the same count, so a receiver told the
    # codec's own k refuses the larger wire, naming the sender and the part.
    from gradcomp import _C
    g = normal(4096, seed=8)
    codec, exact = gradcomp.Codec("topk:ratio=0.05"), gradcomp.Codec("none")
    parts = np.array([[0, 4096, 3, 0], [4096, 4096 + 64, 4, 1]], dtype=np.int64)  # a sparse part, a lossless one
    x = np.concatenate([g, normal(64, seed=9)])
    k = np.array([1024, 0], dtype=np.int64)
    out = np.zeros(32 + codec.max_encoded_bytes(4096, 1024) + 16 + exact.max_encoded_bytes(64), dtype=np.uint8)
    code, _, end, _, _ = _C.encode_parts_into(codec._c, exact._c, x, parts, out, 32, entries=k)
    assert code == 0
    assert codec.inspect(out[32:])["num_elements"] == 4096
    y = np.zeros_like(x)
    _C.decode_parts_into(codec._c, exact._c, out, None, end, y, parts, entries=k)
    kept = np.flatnonzero(y[:4096])
    assert kept.size == 1024 and np.array_equal(y[kept], g[kept])
    assert np.abs(g[kept]).min() >= np.sort(np.abs(g))[-1024]  # the 1024 largest magnitudes
    assert np.array_equal(y[4096:], x[4096:])
    with pytest.raises(gradcomp.DecodeError, match=r"rank 0's wire for elements \[0, 4096\) claims"):
        _C.decode_parts_into(codec._c, exact._c, out, None, end, y, parts)
    with pytest.raises(gradcomp.InvalidArgument, match="entries has 1 values for 2 parts"):
        _C.encode_parts_into(codec._c, exact._c, x, parts, out, 32, entries=np.array([5], dtype=np.int64))
    with pytest.raises(gradcomp.InvalidArgument, match="part 0 asks for -1 entries"):
        _C.encode_parts_into(codec._c, exact._c, x, parts, out, 32, entries=np.array([-1, 0], dtype=np.int64))
    # The counts come from the C++ policy's own rule (compressors/dgc_warmup.h), as its test has them:
    # topk:ratio=0.001 of 10000 over an 8-step warm-up: 25 %, 6.25 %, 1.5625 % rounded up, 0.39 %, then
    # 0 (the codec's own 10); a dense codec (own 0) never gets more.
    own = gradcomp.Codec("topk:ratio=0.001").sparse_entries(10000)
    assert own == 10
    assert [_C.dgc_warmup_entries(own, 10000, step, 8) for step in (0, 2, 4, 6, 8, 9)] == [2500, 625, 157, 40, 0, 0]
    assert _C.dgc_warmup_entries(0, 10000, 0, 8) == 0 and _C.dgc_warmup_entries(5000, 10000, 6, 8) == 5000


def test_error_feedback_specs_are_validated():
    with pytest.raises(gradcomp.InvalidArgument):
        gradcomp.ErrorFeedback("ef42")
    assert gradcomp.ErrorFeedback("dgc:momentum=0.9").num_buffers == 2
    assert "nonfinite=error" in gradcomp.ErrorFeedback("ef").canonical_spec


def test_cuda_arrays_need_an_explicit_stream_and_a_cuda_build():
    if not torch.cuda.is_available():
        # Without a GPU, check what can be: the device check rejects a non-cpu, non-cuda array (a meta
        # tensor exports no DLPack at all) and the build reports whether CUDA is compiled in.
        assert isinstance(gradcomp.build_info["cuda"], bool)
        return
    codec = gradcomp.Codec("int8")  # pragma: no cover -- runs on the GPU machine
    x = torch.randn(1000, device="cuda")
    out = torch.empty(codec.max_encoded_bytes(1000), dtype=torch.uint8, device="cuda")
    with pytest.raises(gradcomp.InvalidArgument, match="stream"):
        codec._c.encode_into(x, out)
    enc = codec.encode(x, out)  # the wrapper passes torch's current stream
    assert enc.wire.cpu().numpy().tobytes() == codec.encode(x.cpu()).wire.tobytes()


def _parts(rows):
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def test_a_message_of_parts_holds_each_parts_own_wire_and_forged_lengths_are_refused():
    codec, exact = gradcomp.Codec("int8"), gradcomp.Codec("none")
    x = normal(3000, seed=4)
    rows = [(0, 1000, 7, 0), (1000, 1100, 8, 1), (1100, 3000, 9, 0)]  # the middle part lossless
    room = 32 + sum(-(-(exact if l else codec).max_encoded_bytes(b - a) // 16) * 16 for a, b, _, l in rows)
    msg = np.zeros(room, dtype=np.uint8)
    code, bad, used, _, _ = gradcomp._C.encode_parts_into(codec._c, exact._c, x, _parts(rows), msg, 32, step=3)
    assert code == 0 and used <= room
    # each wire is exactly what a single encode of that part writes, at 16-byte aligned offsets
    at = 32
    for a, b, tid, lossless in rows:
        single = (exact if lossless else codec).encode(x[a:b], tensor_id=tid, step=3).wire
        assert msg[at:at + single.size].tobytes() == single.tobytes()
        at += -(-single.size // 16) * 16
    assert at == used
    y = np.empty_like(x)
    gradcomp._C.decode_parts_into(codec._c, exact._c, msg, None, used, y, _parts(rows))
    assert np.array_equal(y[1000:1100], x[1000:1100])  # lossless
    assert np.abs(y - x).max() < 0.05
    # a wire claiming more payload than its part can hold (a forged header) is refused, naming the sender
    forged = msg.copy()
    forged[32 + 32:32 + 40] = np.frombuffer(np.uint64(10**6).tobytes(), dtype=np.uint8)
    out = np.full_like(x, 5.0)
    with pytest.raises(gradcomp.DecodeError, match="rank 3's wire for elements \\[0, 1000\\) claims 1000000"):
        gradcomp._C.decode_parts_into(codec._c, exact._c, forged, None, used, out, _parts(rows), origin=3)
    assert np.all(out == 5.0)
    with pytest.raises(gradcomp.DecodeError, match="claims 1024 payload bytes; 20 at most fit"):
        gradcomp._C.decode_parts_into(codec._c, exact._c, msg, None, 100, out, _parts(rows))  # truncated
    with pytest.raises(gradcomp.DecodeError, match="ends at byte 60, before its wire for elements \\[0, 1000\\)"):
        gradcomp._C.decode_parts_into(codec._c, exact._c, msg, None, 60, out, _parts(rows))
    with pytest.raises(gradcomp.InvalidArgument, match="part 0 covers \\[0, 4000\\)"):
        gradcomp._C.decode_parts_into(codec._c, exact._c, msg, None, used, out, _parts([(0, 4000, 1, 0)]))
    # a non-finite value is reported with its index in x, nothing after it encoded
    x[1500] = np.nan
    code, bad, _, _, _ = gradcomp._C.encode_parts_into(codec._c, exact._c, x, _parts(rows), msg, 32)
    assert (code, bad) == (1, 1500)


def test_every_cpu_path_here_writes_the_same_bytes():
    # The vector path is chosen at run time (avx512 where the CPU has it); each one this CPU runs gives the
    # scalar reference's wire, and asking for one it cannot run is refused by name.
    from gradcomp import _C
    saved = _C.cpu_path()
    order = ["scalar", "avx2", "avx512"]
    x = np.concatenate([normal(4099, seed=11) * 3e4, [65519.0, 65520.0, -3.39e38, 1e-40]]).astype(np.float32)
    try:
        for spec in ("fp16", "fp16:prescale=0.125", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int8:rounding=stochastic",
                     "int4", "mxfp8"):
            c = gradcomp.Codec(spec)
            _C.set_cpu_path("scalar")
            want = c.encode(x, seed=5)
            for path in order[1:order.index(_C.supported_cpu_path()) + 1]:
                _C.set_cpu_path(path)
                got = c.encode(x, seed=5)
                assert _C.cpu_path() == path
                assert bytes(got.wire) == bytes(want.wire) and got.saturated == want.saturated, (spec, path)
                assert np.array_equal(c.decode(got.wire).view(np.uint32), c.decode(want.wire).view(np.uint32))
        with pytest.raises(gradcomp.InvalidArgument, match="'sse9' is not one of avx512, avx2, scalar"):
            _C.set_cpu_path("sse9")
    finally:
        _C.set_cpu_path(saved)
