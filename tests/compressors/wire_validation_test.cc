// Malformed wire buffers (docs/reliability.md rows 13-15): every one is a DecodeError naming the problem,
// raised before anything is written to the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "compressors/registry.h"
#include "core/error.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

using testing::encodeToVector;
using testing::headerOf;
using testing::normalVector;

using testing::expectRejected;
using testing::poke;
using testing::rewrite;

class EveryCodec : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryCodec, EveryTruncationIsRejected) {
  auto c = makeCompressor(GetParam());
  const size_t n = 37;
  const auto wire = encodeToVector(*c, normalVector(n, 1));
  for (size_t len = 0; len < wire.size(); ++len) {
    std::vector<std::byte> cut(wire.begin(), wire.begin() + static_cast<ptrdiff_t>(len));
    expectRejected(*c, cut, n, "truncated");
  }
}

TEST_P(EveryCodec, EveryHeaderBitFlipIsRejected) {
  auto c = makeCompressor(GetParam());
  const size_t n = 37;
  const auto wire = encodeToVector(*c, normalVector(n, 2));
  for (size_t byte = 0; byte < kWireHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; bit += 3) {
      auto w = wire;
      w[byte] ^= std::byte(1u << bit);
      std::vector<float> out(n, 42.0f);
      EXPECT_THROW(c->decode(w, out, DecodeMode::Accumulate), DecodeError) << "byte " << byte << " bit " << bit;
      for (float v : out) ASSERT_EQ(v, 42.0f);
    }
  }
}

TEST_P(EveryCodec, ConsistentButWrongHeaderFieldsAreNamed) {
  auto c = makeCompressor(GetParam());
  const size_t n = 37;
  const auto wire = encodeToVector(*c, normalVector(n, 3));
  auto w = wire;
  rewrite(w, [](WireHeader& h) { h.version = 2; });
  expectRejected(*c, w, n, "version 2");
  w = wire;
  rewrite(w, [](WireHeader& h) { h.codec = 999; });
  expectRejected(*c, w, n, "unknown codec id 999");
  w = wire;
  rewrite(w, [](WireHeader& h) { h.numElements = 36; });
  expectRejected(*c, w, n, "");
  w = wire;
  rewrite(w, [](WireHeader& h) { h.payloadBytes += 16; });
  expectRejected(*c, w, n, "truncated");
  w = wire;
  w.resize(w.size() + 16);  // room for it: now the size no longer matches the layout
  rewrite(w, [](WireHeader& h) { h.payloadBytes += 16; });
  expectRejected(*c, w, n, "payload bytes");
  w = wire;
  rewrite(w, [](WireHeader& h) { h.flags ^= 0x200; });  // a bit no codec defines (0x100: 8-bit rounding uniforms)
  expectRejected(*c, w, n, "flag");
  // Element count x size overflowing 64 bits: caught by inspect(), before any allocation.
  w = wire;
  rewrite(w, [](WireHeader& h) { h.numElements = std::numeric_limits<uint64_t>::max() / 2; });
  if (std::string(c->name()) != "randomk") {  // its payload does not grow with n: a valid header
    EXPECT_THROW(c->inspect(w), DecodeError);
  }
  // Output of the wrong size: named.
  std::vector<float> small(n - 1, 42.0f);
  try {
    c->decode(wire, small, DecodeMode::Overwrite);
    FAIL();
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("output has 36"), std::string::npos) << e.what();
  }
}

TEST_P(EveryCodec, PayloadFromAnotherCodecNamesBoth) {
  auto c = makeCompressor(GetParam());
  const std::string other = std::string(c->name()) == "fp16" ? "bf16" : "fp16";
  const auto wire = encodeToVector(*makeCompressor(other), normalVector(9, 4));
  expectRejected(*c, wire, 9, "wire holds codec '" + other + "'");
  expectRejected(*c, wire, 9, std::string("this decoder is '") + c->name() + "'");
}

TEST_P(EveryCodec, MisalignedBufferDecodesTheSame) {
  auto c = makeCompressor(GetParam());
  const auto wire = encodeToVector(*c, normalVector(100, 5));
  std::vector<std::byte> shifted(wire.size() + 1);
  std::memcpy(shifted.data() + 1, wire.data(), wire.size());
  std::vector<float> a(100), b(100);
  c->decode(wire, a, DecodeMode::Overwrite);
  c->decode(std::span<const std::byte>(shifted).subspan(1), b, DecodeMode::Overwrite);
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(All, EveryCodec, ::testing::ValuesIn(codecNames()), [](const auto& p) {
  std::string s = p.param;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
});

// Payload-level corruption, codec by codec (the header stays valid).

TEST(PayloadValidation, SparseIndicesOutOfRangeDuplicatedOrUnsorted) {
  auto c = makeCompressor("topk:k=3");
  const std::vector<float> x = {5, 0, 0, 4, 0, 0, 3, 0, 0, 0};
  const auto wire = encodeToVector(*c, x);  // indices 0, 3, 6 at payload offset 48
  auto w = wire;
  poke<uint32_t>(w, 48 + 8, 10);
  expectRejected(*c, w, 10, "index 10, outside [0, 10)");
  w = wire;
  poke<uint32_t>(w, 48 + 4, 0);
  expectRejected(*c, w, 10, "duplicate or unsorted");
  w = wire;
  poke<uint32_t>(w, 48 + 0, 4);
  expectRejected(*c, w, 10, "duplicate or unsorted");
  w = wire;
  poke<float>(w, 48 + 16, NAN);  // values section at 16
  expectRejected(*c, w, 10, "non-finite value");
  w = wire;
  rewrite(w, [](WireHeader& h) { h.count = 11; });
  expectRejected(*c, w, 10, "11 entries for 10 elements");
}

TEST(PayloadValidation, CodesOutsideTheFormat) {
  const std::vector<float> x = normalVector(16, 6);
  struct Case {
    const char* spec;
    size_t offset;  // from the wire start
    uint8_t byte;
    const char* message;
  };
  // Layouts: [scales: 1 block -> 16 bytes][codes] after the 48-byte header.
  for (const Case& k : {Case{"int8", 64 + 3, 0x80, "code -128 at element 3"},
                        Case{"fp8-e4m3", 64 + 5, 0x7f, "NaN/Inf code at element 5"},
                        Case{"fp8-e5m2", 64 + 5, 0xfc, "NaN/Inf code at element 5"},
                        Case{"terngrad", 64 + 1, 0x30, "code 3 at element 6"},
                        Case{"fp16", 48 + 2 * 7 + 1, 0x7c, "Inf/NaN code at element 7"},
                        Case{"bf16", 48 + 2 * 2 + 1, 0xff, "Inf/NaN code at element 2"},
                        Case{"mxfp8", 64 + 5, 0x7f, "NaN/Inf element code at element 5"},
                        Case{"mxfp8:elem=e5m2", 64 + 5, 0xfc, "NaN/Inf element code at element 5"},
                        Case{"int4", 64 + 1, 0x80, "code -8 at element 3"},
                        Case{"int4", 64 + 7, 0x08, "code -8 at element 14"}}) {
    auto c = makeCompressor(k.spec);
    auto w = encodeToVector(*c, x);
    if (std::string(k.spec) == "fp16" || std::string(k.spec) == "bf16") w[k.offset - 1] = std::byte{0x80};
    w[k.offset] = std::byte{k.byte};
    expectRejected(*c, w, x.size(), k.message);
  }
}

// The casts check their codes a tile at a time while overwrite-decoding (the payload read once): a bad
// code in a later tile leaves out all zeros, never the tiles decoded before it; accumulating checks
// first and leaves the caller's sum untouched. The error names the element either way.
TEST(PayloadValidation, AnInfCodeInALaterTileLeavesZerosNotAPartialDecode) {
  const size_t n = 8192, badAt = 5001;
  const std::vector<float> x = normalVector(n, 8);
  for (const char* spec : {"fp16", "bf16"}) {
    SCOPED_TRACE(spec);
    auto c = makeCompressor(spec);
    auto w = encodeToVector(*c, x);
    const uint16_t inf = std::string(spec) == "fp16" ? 0x7c00 : 0x7f80;
    std::memcpy(w.data() + 48 + 2 * badAt, &inf, 2);
    std::vector<float> out(n, 42.0f);
    try {
      c->decode(w, out, DecodeMode::Overwrite);
      ADD_FAILURE() << "accepted an Inf code";
    } catch (const DecodeError& e) {
      EXPECT_NE(std::string(e.what()).find("Inf/NaN code at element 5001"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
    std::vector<float> sum(n, 42.0f);
    EXPECT_THROW(c->decode(w, sum, DecodeMode::Accumulate), DecodeError);
    EXPECT_TRUE(std::all_of(sum.begin(), sum.end(), [](float v) { return v == 42.0f; }));
  }
}

// int8 checks each tile's scales and codes in its overwrite decode's own pass, and past 16 MiB streams its
// output: a -128 or a rejected scale in the last tile leaves out all zeros (never the tiles before it) and
// is named; accumulating checks first and leaves the sum untouched; an accepted payload decodes to the
// values the accumulating decode adds, bit for bit, on the plain and the streamed path.
TEST(PayloadValidation, Int8ChecksEachTileAsItDecodesAndLeavesZerosNotAPartialDecode) {
  auto c = makeCompressor("int8");
  for (const size_t n : {size_t{8192}, (size_t{1} << 22) + 1024}) {  // 32 / 16388 blocks: 16-byte scale sections
    SCOPED_TRACE(n);
    const std::vector<float> x = normalVector(n, 9);
    const auto wire = encodeToVector(*c, x);
    const size_t blocks = n / 256, codes = 48 + 4 * blocks;
    std::vector<float> out(n, 42.0f), sum(n, 0.0f);
    c->decode(wire, out, DecodeMode::Overwrite);
    c->decode(wire, sum, DecodeMode::Accumulate);
    ASSERT_EQ(std::memcmp(out.data(), sum.data(), n * sizeof(float)), 0);
    const auto refused = [&](std::vector<std::byte> w, const std::string& named) {
      std::fill(out.begin(), out.end(), 42.0f);
      try {
        c->decode(w, out, DecodeMode::Overwrite);
        ADD_FAILURE() << "accepted: " << named;
      } catch (const DecodeError& e) {
        EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
      }
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return std::bit_cast<uint32_t>(v) == 0; }));
      std::vector<float> untouched(n, 42.0f);
      EXPECT_THROW(c->decode(w, untouched, DecodeMode::Accumulate), DecodeError);
      EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == 42.0f; }));
    };
    auto badCode = wire;
    badCode[codes + n - 5] = std::byte{0x80};
    refused(badCode, "code -128 at element " + std::to_string(n - 5));
    auto badScale = wire;
    const float zero = 0.0f;
    std::memcpy(badScale.data() + 48 + 4 * (blocks - 1), &zero, 4);
    refused(badScale, "block " + std::to_string(blocks - 1) + " carries an invalid scale");
  }
}

TEST(PayloadValidation, ScalesThatAreZeroInfOrNaN) {
  const std::vector<float> x = normalVector(16, 7);
  for (const char* spec : {"fp8-e4m3", "fp8-e5m2", "int8"}) {
    auto c = makeCompressor(spec);
    const auto wire = encodeToVector(*c, x);
    for (float bad : {0.0f, -1.0f, INFINITY, NAN}) {
      auto w = wire;
      poke<float>(w, 48, bad);
      expectRejected(*c, w, x.size(), "block 0 carries an invalid scale");
    }
  }
  for (const char* spec : {"sign", "qsgd", "terngrad"}) {  // zero is a valid scale for these
    auto c = makeCompressor(spec);
    auto w = encodeToVector(*c, x);
    poke<float>(w, 48, NAN);
    expectRejected(*c, w, x.size(), "invalid scale");
  }
  auto onebit = makeCompressor("onebit");
  auto w = encodeToVector(*onebit, x);
  poke<float>(w, 48, -1.0f);  // the positive mean cannot be negative
  expectRejected(*onebit, w, x.size(), "invalid means");
  auto none = makeCompressor("none");
  w = encodeToVector(*none, x);
  poke<float>(w, 48 + 4 * 9, INFINITY);
  expectRejected(*none, w, x.size(), "non-finite value at element 9");
}

// The block-scaled narrow formats: every scale the decoder could not use finitely is refused, naming it.
TEST(PayloadValidation, MicroscalingScalesThatOverflowOrAreNaN) {
  const std::vector<float> x = normalVector(16, 7);
  struct Case {
    const char* spec;
    uint8_t scaleByte;  // block 0's scale code, right after the header
    const char* message;
  };
  for (const Case& k : {Case{"mxfp8", 0xff, "E8M0 scale code 255 (NaN)"},
                        Case{"mxfp8", 247, "scale code 247; accepted: 0 .. 246"},  // 448 x 2^120 = Inf
                        Case{"mxfp8:elem=e5m2", 240, "scale code 240; accepted: 0 .. 239"},
                        Case{"mxfp6", 253, "accepted: 0 .. 252"},
                        Case{"mxfp6:elem=e3m2", 251, "accepted: 0 .. 250"},
                        Case{"mxfp4", 253, "accepted: 0 .. 252"},
                        Case{"nvfp4", 0x7f, "E4M3 scale code 0x7f (NaN)"},
                        Case{"nvfp4", 0x81, "E4M3 scale code 0x81 (negative)"}}) {
    SCOPED_TRACE(k.spec);
    auto c = makeCompressor(k.spec);
    auto w = encodeToVector(*c, x);
    w[kWireHeaderBytes] = std::byte{k.scaleByte};
    expectRejected(*c, w, x.size(), k.message);
  }
  // The largest accepted MX scale decodes finite: 448 x 2^119 = 1.75 x 2^127.
  auto mx = makeCompressor("mxfp8");
  auto w = encodeToVector(*mx, x);
  w[kWireHeaderBytes] = std::byte{246};
  for (float v : testing::decodeToVector(*mx, w, x.size())) EXPECT_TRUE(std::isfinite(v));
  // nvfp4's tensor scale travels in the header: 6 x 448 x t must be finite, t a positive normal.
  auto nv = makeCompressor("nvfp4");
  for (float t : {FLT_MAX / 2000.0f, 0.0f, -1.0f, 1e-39f, std::numeric_limits<float>::quiet_NaN()}) {
    auto wt = encodeToVector(*nv, x);
    rewrite(wt, [t](WireHeader& h) { std::memcpy(&h.param, &t, 4); });
    expectRejected(*nv, wt, x.size(), "header tensor scale");
  }
  auto i4 = makeCompressor("int4");
  auto wi = encodeToVector(*i4, x);
  poke(wi, kWireHeaderBytes, 1e-38f);  // 7 x 1e38 = Inf
  expectRejected(*i4, wi, x.size(), "block 0 carries an invalid scale");
}

// rotate=hadamard: the rotation bits of the flags and the rotation section are checked like every field.
TEST(PayloadValidation, RotationFieldsAreValidated) {
  const std::vector<float> x = normalVector(64, 8);
  auto c = makeCompressor("int4:rotate=hadamard,rblock=32");
  const auto good = encodeToVector(*c, x);
  auto w = good;
  rewrite(w, [](WireHeader& h) { h.flags = (h.flags & ~(0x1fu << 24)) | (14u << 24); });
  expectRejected(*c, w, x.size(), "rotation block 2^14");
  w = good;
  rewrite(w, [](WireHeader& h) { h.flags &= ~(1u << 31); });
  expectRejected(*c, w, x.size(), "rotation block bits set without the rotation flag");
  w = good;
  poke(w, kWireHeaderBytes + 16, int32_t{128});
  expectRejected(*c, w, x.size(), "rotation scale exponent 128");
  w = good;
  w[kWireHeaderBytes + 25] = std::byte{1};
  expectRejected(*c, w, x.size(), "rotation section byte 25 must be zero");
  // A decoder without rotation reads a rotated wire (the wire says everything), and vice versa.
  auto plain = makeCompressor("int4");
  EXPECT_EQ(testing::decodeToVector(*plain, good, x.size()), testing::decodeToVector(*c, good, x.size()));
  // rotate= is refused where it does not apply, and rblock= must be a power of two.
  EXPECT_THROW(makeCompressor("fp16:rotate=hadamard"), InvalidArgument);
  EXPECT_THROW(makeCompressor("int8:rotate=hadamard,rblock=48"), InvalidArgument);
  EXPECT_THROW(makeCompressor("int8:rblock=64"), InvalidArgument);
  EXPECT_THROW(makeCompressor("int8:rotate=hadamard,rblock=16384"), InvalidArgument);
}

// Every code and scale of this payload is valid, but the inverse rotation's butterflies overflow: the
// smallest scale whose largest code still decodes finite (7 x fl(1 / s) just below FLT_MAX) under every
// code +7, so y = 2.98e38 everywhere and y0 + y1 = Inf. An encoder never writes it (it keeps |y| below
// 2^101), and the decoder reports it, in both modes, before anything reaches out (the chunked decode:
// several chunks, the bad one not the first).
TEST(PayloadValidation, RotatedPayloadWhoseInverseOverflowsIsRejected) {
  const size_t n = 8192;
  const std::vector<float> x = normalVector(n, 5);
  auto c = makeCompressor("int4:rotate=hadamard,rblock=256");
  auto w = encodeToVector(*c, x);
  const size_t payload = kWireHeaderBytes + 32;  // after the header and the rotation section
  const size_t blocks = n / 64, codes = payload + blocks * 4;
  const float tiny = 8.0f / FLT_MAX;
  ASSERT_TRUE(std::isfinite(7.0f * (1.0f / tiny)));
  for (size_t b = 100; b < 104; ++b) poke(w, payload + 4 * b, tiny);  // elements 6400 .. 6655
  for (size_t i = 6400 / 2; i < 6656 / 2; ++i) w[codes + i] = std::byte{0x77};
  expectRejected(*c, w, n, "the rotated payload decodes to a non-finite value at element 6400");
}

TEST(PayloadValidation, Fp8FlavourMismatchNamesBoth) {
  auto c = makeCompressor("fp8-e4m3");
  auto w = encodeToVector(*c, normalVector(8, 8));
  rewrite(w, [](WireHeader& h) { h.flags = 1; });
  expectRejected(*c, w, 8, "flavour fnuz");
  expectRejected(*c, w, 8, "flavour ocp");
}

TEST(PayloadValidation, NotAGradcompBuffer) {
  auto c = makeCompressor("none");
  std::vector<std::byte> junk(64, std::byte{0x11});
  expectRejected(*c, junk, 4, "not a gradcomp wire buffer");
}

TEST(EncodeArguments, BufferTooSmallOrMisalignedIsAnError) {
  auto c = makeCompressor("fp16");
  const auto x = normalVector(10, 9);
  testing::WireBuffer buf(256);
  EXPECT_THROW(c->encode(x, buf.span(c->maxEncodedBytes(10) - 1), {}), InvalidArgument);
  EXPECT_THROW(c->encode(x, buf.span(200).subspan(1), {}), InvalidArgument);
  ExecContext gpu;
  gpu.device = Device::Cuda;
  EXPECT_THROW(c->encode(x, buf.span(200), {}, gpu), BackendUnavailable);
}

}  // namespace
}  // namespace gradcomp
