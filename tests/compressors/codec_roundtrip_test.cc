// Invariants every codec must satisfy, over the cross product codec x size (docs/architecture.md: "invariants over
// a cross product, not hand-picked happy cases"), plus each codec's own stated error bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "compressors/registry.h"
#include "core/error.h"
#include "kernels/cpu/hadamard_rotation.h"
#include "kernels/scalar/float_formats.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

using testing::decodeToVector;
using testing::encodeToVector;
using testing::normalVector;

const std::vector<std::string>& kSpecs = testing::kCodecConfigurations;
// Bitwise equality of two float arrays (memcmp would receive null pointers for n = 0).
bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

const std::vector<size_t> kSizes = {0, 1, 7, 8, 9, 1000, (1u << 20) + 3};

std::string caseName(const ::testing::TestParamInfo<std::tuple<std::string, size_t>>& info) {
  std::string s = std::get<0>(info.param) + "_n" + std::to_string(std::get<1>(info.param));
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class CodecInvariants : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {
 protected:
  void SetUp() override {
    codec = makeCompressor(std::get<0>(GetParam()));
    n = std::get<1>(GetParam());
    x = normalVector(n, 1234 + static_cast<uint32_t>(n));
    ctx.seed = 99;
    ctx.step = 3;
    ctx.tensorId = 5;
  }
  std::unique_ptr<Compressor> codec;
  size_t n = 0;
  std::vector<float> x;
  EncodeContext ctx;
};

TEST_P(CodecInvariants, EncodedSizeWithinMaxAndBytesDeterministic) {
  const auto a = encodeToVector(*codec, x, ctx, std::byte{0xab});
  const auto b = encodeToVector(*codec, x, ctx, std::byte{0x00});  // buffer contents must not leak
  EXPECT_LE(a.size(), codec->maxEncodedBytes(n));
  EXPECT_EQ(a, b);
  if (codec->traits().fixedSize) {
    EXPECT_EQ(a.size(), codec->maxEncodedBytes(n));
  }
}

TEST_P(CodecInvariants, TwoThreadsGiveTheSameBytes) {
  const size_t cap = codec->maxEncodedBytes(n, ctx);
  testing::WireBuffer buf(cap);
  ExecContext two;
  two.cpuThreads = 2;
  const EncodeResult r = codec->encode(x, buf.span(cap), ctx, two);
  const auto one = encodeToVector(*codec, x, ctx);
  const auto s = buf.span(r.wireBytes);
  EXPECT_EQ(std::vector<std::byte>(s.begin(), s.end()), one);
  std::vector<float> d1(n), d2(n);
  codec->decode(one, d1, DecodeMode::Overwrite);
  codec->decode(one, d2, DecodeMode::Overwrite, two);
  EXPECT_TRUE(sameBits(d1, d2));
}

TEST_P(CodecInvariants, AccumulateEqualsOverwriteThenAdd) {
  const auto wire = encodeToVector(*codec, x, ctx);
  const auto decoded = decodeToVector(*codec, wire, n);
  std::vector<float> acc = normalVector(n, 77);
  std::vector<float> expect = acc;
  for (size_t i = 0; i < n; ++i) expect[i] += decoded[i];
  codec->decode(wire, acc, DecodeMode::Accumulate);
  EXPECT_TRUE(sameBits(acc, expect));
}

TEST_P(CodecInvariants, FusedResidualEqualsEncodeOfSumMinusDecode) {
  const std::vector<float> e = normalVector(n, 555, 0.1f);
  std::vector<float> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = x[i] + e[i];
  const auto expectWire = encodeToVector(*codec, c, ctx);
  const auto decoded = decodeToVector(*codec, expectWire, n);
  const size_t cap = codec->maxEncodedBytes(n, ctx);
  testing::WireBuffer buf(cap);
  std::vector<float> eOut(n, 3.0f);
  const EncodeResult r = codec->encodeWithResidual(x, e, eOut, buf.span(cap), ctx);
  const auto got = buf.span(r.wireBytes);
  EXPECT_EQ(std::vector<std::byte>(got.begin(), got.end()), expectWire);
  if (testing::isRotated(std::get<0>(GetParam()))) {
    // The residual is rotated back from the rotated domain: equal to c - decoded up to the rounding of the
    // two transforms (a few ulps of the block's largest magnitude per butterfly stage).
    double scale = 0;
    for (size_t i = 0; i < n; ++i) scale = std::max({scale, std::fabs(double(c[i])), std::fabs(double(decoded[i]))});
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(eOut[i], c[i] - decoded[i], scale * 2e-6) << i;
    return;
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(eOut[i], c[i] - decoded[i]) << i;
}

TEST_P(CodecInvariants, AllZeroInputDecodesToExactZeros) {
  const std::vector<float> zeros(n, 0.0f);
  const auto d = decodeToVector(*codec, encodeToVector(*codec, zeros, ctx), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], 0.0f) << i;  // no 0/0, no NaN
}

TEST_P(CodecInvariants, NonFiniteInputIsRejectedNamingTheIndex) {
  if (n == 0) return;
  for (size_t where : {size_t{0}, n / 2, n - 1}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> y = x;
      y[where] = bad;
      const size_t cap = codec->maxEncodedBytes(n, ctx);
      testing::WireBuffer buf(cap);
      try {
        codec->encode(y, buf.span(cap), ctx);
        FAIL() << "no error for " << bad << " at " << where;
      } catch (const NonFiniteError& e) {
        EXPECT_EQ(e.index(), where);
        EXPECT_EQ(e.tensorId(), ctx.tensorId);
        EXPECT_NE(std::string(e.what()).find("index " + std::to_string(where)), std::string::npos) << e.what();
      }
    }
  }
}

TEST_P(CodecInvariants, StochasticCodecsDrawPerRankStreams) {
  if (!codec->traits().stochastic || n < 64) return;
  EncodeContext other = ctx;
  other.rank = 1;
  const auto a = encodeToVector(*codec, x, ctx), b = encodeToVector(*codec, x, other);
  if (codec->traits().needsSharedSeed)
    EXPECT_EQ(a, b);  // random-k: coordinates come from (seed, step, tensor), shared by all ranks
  else
    EXPECT_NE(a, b);
  other = ctx;
  other.step = ctx.step + 1;
  EXPECT_NE(encodeToVector(*codec, x, ctx), encodeToVector(*codec, x, other));
}

// Each codec's own bound on |decode(encode(x)) - x|.
// rotate=hadamard: the wire is the header (with the rotation bits), the 32-byte rotation section and,
// byte for byte, the unrotated codec's payload of y = H D x / sqrt(b); and the round-trip error equals the
// unrotated codec's error on y in L2 norm (the rotation is orthonormal). So every element-wise bound below
// holds for the rotated codecs in the rotated domain.
TEST_P(CodecInvariants, RotationIsTheCodecInAnOrthonormalBasis) {
  const std::string spec = std::get<0>(GetParam());
  if (!testing::isRotated(spec)) return;
  // The same spec without rotate= and rblock=.
  const size_t colon = spec.find(':');
  std::string plainSpec = spec.substr(0, colon), params;
  size_t rblock = 256;
  for (size_t at = colon + 1; at < spec.size();) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string kv = spec.substr(at, end - at);
    if (kv.rfind("rblock=", 0) == 0) rblock = std::stoul(kv.substr(7));
    else if (kv.rfind("rotate=", 0) != 0) params += (params.empty() ? "" : ",") + kv;
    at = end + 1;
  }
  if (!params.empty()) plainSpec += ":" + params;
  const auto plain = makeCompressor(plainSpec);
  ASSERT_EQ(plain->name(), codec->name()) << plainSpec;
  std::vector<float> y(n);
  cpu::rotateForward(x.data(), y.data(), n, rblock, {ctx.seed, ctx.step, ctx.tensorId}, 1.0f);
  const auto wire = encodeToVector(*codec, x, ctx);
  const auto plainWire = encodeToVector(*plain, y, ctx);
  ASSERT_EQ(wire.size(), plainWire.size() + 32);
  EXPECT_TRUE(std::equal(wire.begin() + 48 + 32, wire.end(), plainWire.begin() + 48));
  const auto d = decodeToVector(*codec, wire, n), dy = decodeToVector(*plain, plainWire, n);
  double errX = 0, errY = 0;
  for (size_t i = 0; i < n; ++i) {
    errX += double(d[i] - x[i]) * (d[i] - x[i]);
    errY += double(dy[i] - y[i]) * (dy[i] - y[i]);
  }
  EXPECT_NEAR(std::sqrt(errX), std::sqrt(errY), 1e-5 * std::sqrt(errY) + 1e-6);
}

// A large rotated tensor is rotated and encoded chunk by chunk, on two threads: the wire is still the
// rotation section plus the unrotated codec's payload of the whole tensor rotated at once, and the
// fused error-feedback residual is the same on one thread and on two.
TEST_P(CodecInvariants, ChunkedRotationOnTwoThreadsGivesTheWholeTensorsBytes) {
  const std::string spec = std::get<0>(GetParam());
  // Its own tensor size: run once per rotated codec (at the suite's n = 1000), not once per n.
  if (!testing::isRotated(spec) || n != 1000) return;
  const size_t big = (size_t{1} << 19) + 1003;  // two threads' worth, ending in partial blocks
  std::vector<float> g(big), e(big);
  std::mt19937 rng(77);
  std::normal_distribution<float> d;
  for (size_t i = 0; i < big; ++i) {
    g[i] = d(rng);
    e[i] = 0.01f * d(rng);
  }
  const auto oneThread = encodeToVector(*codec, g, ctx);
  const size_t cap = codec->maxEncodedBytes(big, ctx);
  ExecContext two;
  two.cpuThreads = 2;
  testing::WireBuffer buf(cap);
  const EncodeResult r = codec->encode(g, buf.span(cap), ctx, two);
  const auto s = buf.span(r.wireBytes);
  ASSERT_EQ(std::vector<std::byte>(s.begin(), s.end()), oneThread);
  // The wire's codec payload against the unrotated codec on the whole rotated tensor.
  const uint32_t rblock = [&] {
    const size_t at = spec.find("rblock=");
    return at == std::string::npos ? 256u : static_cast<uint32_t>(std::stoul(spec.substr(at + 7)));
  }();
  std::string plainSpec = spec.substr(0, spec.find(':')), params;
  for (size_t at = spec.find(':') + 1; at < spec.size();) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string kv = spec.substr(at, end - at);
    if (kv.rfind("rblock=", 0) != 0 && kv.rfind("rotate=", 0) != 0) params += (params.empty() ? "" : ",") + kv;
    at = end + 1;
  }
  if (!params.empty()) plainSpec += ":" + params;
  std::vector<float> y(big);
  cpu::rotateForward(g.data(), y.data(), big, rblock, {ctx.seed, ctx.step, ctx.tensorId}, 1.0f);
  const auto plainWire = encodeToVector(*makeCompressor(plainSpec), y, ctx);
  ASSERT_EQ(oneThread.size(), plainWire.size() + 32);
  EXPECT_TRUE(std::equal(oneThread.begin() + 48 + 32, oneThread.end(), plainWire.begin() + 48));
  std::vector<float> r1(big), r2(big);
  codec->encodeWithResidual(g, e, r1, buf.span(cap), ctx);
  const auto w1 = std::vector<std::byte>(buf.span(cap).begin(), buf.span(cap).begin() + r.wireBytes);
  const EncodeResult r2Result = codec->encodeWithResidual(g, e, r2, buf.span(cap), ctx, two);
  ASSERT_EQ(r2Result.wireBytes, r.wireBytes);
  EXPECT_TRUE(std::equal(w1.begin(), w1.end(), buf.span(cap).begin()));
  EXPECT_TRUE(sameBits(r1, r2));
  // And the residual is c - decode(wire) up to the two rotations' rounding (relative to |c|: a few fp32
  // ulps per butterfly stage).
  std::vector<float> decoded(big);
  codec->decode(w1, decoded, DecodeMode::Overwrite);
  double err = 0, normC = 0;
  for (size_t i = 0; i < big; ++i) {
    const double c = double(g[i] + e[i]), want = c - decoded[i];
    err += (r1[i] - want) * (r1[i] - want);
    normC += c * c;
  }
  EXPECT_LE(std::sqrt(err), 2e-6 * std::sqrt(normC));
}

TEST_P(CodecInvariants, RoundTripWithinTheCodecBound) {
  if (testing::isRotated(std::get<0>(GetParam()))) return;  // in the rotated domain: the test above
  const auto wire = encodeToVector(*codec, x, ctx);
  const auto d = decodeToVector(*codec, wire, n);
  const std::string name = codec->name();
  const uint32_t block = [&] {
    WireHeader h;
    std::memcpy(&h, wire.data(), sizeof h);
    return h.blockSize;
  }();
  auto blockOf = [&](size_t i, auto reduce) {
    const size_t b0 = i / block * block, b1 = std::min(n, b0 + block);
    return reduce(b0, b1);
  };
  auto amax = [&](size_t b0, size_t b1) {
    float m = 0;
    for (size_t j = b0; j < b1; ++j) m = std::max(m, std::fabs(x[j]));
    return m;
  };
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    const float err = std::fabs(d[i] - x[i]);
    nonzero += d[i] != 0.0f;
    if (name == "none") {
      ASSERT_EQ(d[i], x[i]);
    } else if (name == "fp16") {
      ASSERT_LE(err, std::fabs(x[i]) * 0x1p-11f + 0x1p-24f * 8) << i;
    } else if (name == "bf16") {
      ASSERT_LE(err, std::fabs(x[i]) * 0x1p-8f) << i;
    } else if (name == "fp8-e4m3" || name == "fp8-e5m2") {
      const bool e4 = name == "fp8-e4m3";
      const float m = blockOf(i, amax);
      // Half an ulp relative, or half the subnormal step (2^-10 / 2^-17 of max) in absolute terms.
      const float bound = std::fabs(x[i]) * (e4 ? 0x1p-4f : 0x1p-3f) + m * (e4 ? 0x1p-10f / 448 : 0x1p-17f / 57344);
      ASSERT_LE(err, bound * 1.0001f) << i;
    } else if (name == "int8") {
      const float m = blockOf(i, amax);
      ASSERT_LE(err, m / 127.0f * (codec->traits().stochastic ? 1.0001f : 0.5001f)) << i;
    } else if (name == "qsgd") {
      const float norm = blockOf(i, [&](size_t b0, size_t b1) {
        double s = 0;
        for (size_t j = b0; j < b1; ++j) s += double(x[j]) * x[j];
        return static_cast<float>(std::sqrt(s));
      });
      WireHeader h;
      std::memcpy(&h, wire.data(), sizeof h);  // flags: bits per element in the low byte, bit 8 the uniforms' width
      ASSERT_LE(err, norm / static_cast<float>((1 << ((h.flags & 0xffu) - 1)) - 1) * 1.0001f) << i;
    } else if (name == "terngrad") {
      ASSERT_LE(err, blockOf(i, amax) * 1.0001f) << i;
      ASSERT_TRUE(d[i] == 0.0f || std::fabs(d[i]) == blockOf(i, amax)) << i;
    } else if (name == "sign") {
      const float mean = blockOf(i, [&](size_t b0, size_t b1) {
        double s = 0;
        for (size_t j = b0; j < b1; ++j) s += std::fabs(x[j]);
        return static_cast<float>(s / double(b1 - b0));
      });
      ASSERT_EQ(d[i], x[i] > 0 ? mean : -mean) << i;
    } else if (name == "onebit") {
      ASSERT_EQ(d[i] >= 0.0f, x[i] >= 0.0f) << i;
    } else if (name == "topk" || name == "threshold") {
      const bool fp16 = codec->spec().getString("values", "fp32") == "fp16";
      ASSERT_TRUE(d[i] == 0.0f || d[i] == (fp16 ? scalar::halfBitsToFloat(scalar::floatToHalfBits(x[i])) : x[i])) << i;
    } else if (name == "randomk") {
      if (d[i] != 0.0f && !codec->spec().has("unbiased")) {
        ASSERT_EQ(d[i], x[i]) << i;
      }
    }
  }
  if (codec->traits().sparse && n > 0) {
    WireHeader h;
    std::memcpy(&h, wire.data(), sizeof h);
    EXPECT_EQ(nonzero, h.count);  // normal data has no exact zeros
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecInvariants,
                         ::testing::Combine(::testing::ValuesIn(kSpecs), ::testing::ValuesIn(kSizes)), caseName);

TEST(Registry, EveryCodecIsCoveredAndUnknownNamesAreNamed) {
  for (const auto& name : codecNames()) {
    bool covered = false;
    for (const auto& s : kSpecs) covered |= CodecSpec::parse(s).name() == name;
    EXPECT_TRUE(covered) << name << " has no test instantiation";
    EXPECT_STREQ(makeCompressor(name)->name(), name.c_str());
  }
  try {
    makeCompressor("fp7");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown codec 'fp7'"), std::string::npos);
  }
}

TEST(Registry, BadParametersAreRejectedAtConstruction) {
  for (const char* bad : {"int8:block=0", "fp8-e4m3:block=-1", "qsgd:bits=1", "qsgd:bits=9", "topk:k=0",
                          "topk:ratio=0", "topk:ratio=1.5", "topk:k=5,ratio=0.1", "int8:rounding=up",
                          "fp16:prescale=0", "fp16:prescale=nan", "sign:blok=8", "topk:ratio", "none:x=1"}) {
    EXPECT_THROW(makeCompressor(bad), InvalidArgument) << bad;
  }
}

TEST(Fp16Codec, SaturationsAreCountedAndPrescaleKeepsSumsInRange) {
  auto c = makeCompressor("fp16");
  std::vector<float> x = {1.0f, 8e4f, -1e6f, 65504.0f};
  const size_t cap = c->maxEncodedBytes(x.size());
  testing::WireBuffer buf(cap);
  EXPECT_EQ(c->encode(x, buf.span(cap), {}).saturated, 2u);
  auto pre = makeCompressor("fp16:prescale=0.0625");
  testing::WireBuffer buf2(cap);
  EXPECT_EQ(pre->encode(x, buf2.span(cap), {}).saturated, 0u);
  std::vector<float> d(x.size());
  pre->decode(buf2.span(cap), d, DecodeMode::Overwrite);
  EXPECT_EQ(d[1], 8e4f);  // 80000/16 = 5000 is exact in fp16
}

TEST(Fp16Codec, LargeTensorsStreamTheSameBytes) {
  // From 2^22 elements the 16-bit payloads are written with non-temporal stores: same bytes.
  const size_t n = (size_t{1} << 22) + 24;
  const auto x = normalVector(n, 41, 1000.0f);
  for (const char* spec : {"fp16", "bf16"}) {
    const auto wire = encodeToVector(*makeCompressor(spec), x);
    std::vector<uint16_t> payload(n);
    std::memcpy(payload.data(), wire.data() + kWireHeaderBytes, n * 2);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t expect = std::string(spec) == "fp16" ? scalar::floatToHalfBits(x[i]) : scalar::floatToBf16Bits(x[i]);
      ASSERT_EQ(payload[i], expect) << spec << " element " << i;
    }
  }
}

TEST(LargeOverwriteDecode, StreamedStoresGiveTheAccumulatedValuesAlignedOrNot) {
  // From 2^22 elements fp16 and bf16 overwrite `out` with non-temporal stores (after a head up to the
  // first 64-byte boundary): the values must be those of adding the decode into zeros, at any alignment
  // and thread count, as for the codecs that never stream (int8, int4).
  const size_t n = (size_t{1} << 22) + 40;
  const auto x = normalVector(n, 43, 3.0f);
  ExecContext two;
  two.cpuThreads = 2;
  for (const char* spec : {"fp16", "bf16", "int8", "int4"}) {
    const auto codec = makeCompressor(spec);
    const auto wire = encodeToVector(*codec, x);
    std::vector<float> reference(n, 0.0f);
    codec->decode(wire, reference, DecodeMode::Accumulate);
    std::vector<float> buffer(n + 32, -1.0f);  // 15 floats to the boundary, 8 of offset
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{8}})
      for (const ExecContext& exec : {ExecContext{}, two}) {
        float* base = buffer.data();
        while (reinterpret_cast<uintptr_t>(base) % 64) ++base;  // 64-byte aligned, then offset by floats
        std::span<float> out(base + offset, n);
        codec->decode(wire, out, DecodeMode::Overwrite, exec);
        ASSERT_TRUE(std::memcmp(out.data(), reference.data(), n * sizeof(float)) == 0)
            << spec << " offset " << offset << " threads " << exec.cpuThreads;
      }
  }
}

TEST(SignCodec, ZerosSplitEvenlyBetweenSigns) {
  auto c = makeCompressor("sign:block=8");
  std::vector<float> x = {0, 0, 0, 0, 0, 0, 0, 4};  // mean |x| = 0.5
  const auto d = decodeToVector(*c, encodeToVector(*c, x), x.size());
  EXPECT_EQ(d, (std::vector<float>{0.5f, -0.5f, 0.5f, -0.5f, 0.5f, -0.5f, 0.5f, 0.5f}));
}

TEST(BitPacking, TailBitsAreZeroOnEncodeAndIgnoredOnDecode) {
  struct Case {
    const char* spec;
    unsigned bits;
  };
  for (const Case c : {Case{"sign", 1}, Case{"onebit", 1}, Case{"qsgd:bits=3", 3}, Case{"terngrad", 2}}) {
    auto codec = makeCompressor(c.spec);
    const size_t n = 13;
    auto wire = encodeToVector(*codec, normalVector(n, 4));
    // One block: the scale section pads to 16 bytes, then the codes (header 48 + 16 = 64).
    const size_t last = 64 + (n * c.bits + 7) / 8 - 1;
    const unsigned used = (n * c.bits) % 8;
    ASSERT_LT(last, wire.size());
    EXPECT_EQ(std::to_integer<unsigned>(wire[last]) >> used, 0u) << c.spec;
    const auto before = decodeToVector(*codec, wire, n);
    wire[last] |= std::byte(0xff << used);
    EXPECT_EQ(decodeToVector(*codec, wire, n), before) << c.spec;
  }
}

}  // namespace
}  // namespace gradcomp
