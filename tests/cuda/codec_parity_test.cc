// Every codec through the Compressor API on CUDA buffers against the same calls on host buffers
// (issue 3): the same wire bytes, EncodeResult, residuals (in place and separate) and decoded values,
// byte for byte, over a size sweep with odd sizes and misaligned device pointers; the same errors for
// NaN/Inf input, a poisoned residual and corrupted payloads. Built wherever CUDA is; registered in ctest
// only where a GPU answers, and run by scripts/gpu-check (also under compute-sanitizer memcheck).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compressors/registry.h"
#include "core/error.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/parity_specs.h"

namespace gradcomp {
namespace {

using testing::DeviceArray;

// A host wire buffer, 16-byte aligned, pre-filled with junk so unwritten bytes show up.
struct HostWire {
  std::vector<std::byte> storage;
  std::span<std::byte> span;
  explicit HostWire(size_t bytes) : storage(bytes + 16, std::byte{0xa5}) {
    auto p = reinterpret_cast<uintptr_t>(storage.data());
    span = {storage.data() + (16 - p % 16) % 16, bytes};
  }
};

std::vector<float> testInput(size_t n, uint64_t seed) { return testing::parityInput(n, seed, 1e6f); }

std::vector<size_t> sizes() {
  const char* cap = std::getenv("GRADCOMP_PARITY_MAX_N");
  const size_t maxN = cap ? std::strtoull(cap, nullptr, 10) : SIZE_MAX;
  std::vector<size_t> v;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{255}, size_t{1000}, size_t{4097},
                   size_t{65539}, size_t{1} << 20})
    if (n <= maxN) v.push_back(n);
  return v;
}

const std::vector<std::string>& specs() { return testing::codecParitySpecs(); }

template <typename T>
::testing::AssertionResult sameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data());
  for (size_t i = 0; i < a.size() * sizeof(T); ++i)
    if (pa[i] != pb[i])
      return ::testing::AssertionFailure() << "first difference at byte " << i << " (element " << i / sizeof(T)
                                           << "): " << int(pa[i]) << " vs " << int(pb[i]);
  return ::testing::AssertionSuccess();
}

ExecContext gpu() {
  ExecContext e;
  e.device = Device::Cuda;
  return e;
}

EncodeContext context() { return {1234, 3, 17, 42, 0}; }

class CodecParity : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecParity, EncodeResidualAndDecodeMatchTheCpuBytes) {
  auto codec = makeCompressor(GetParam());
  for (size_t n : sizes())
    for (size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(::testing::Message() << GetParam() << " n=" << n << " offset=" << offset);
      const auto x = testInput(n, 11 * n + offset);
      std::vector<float> residual(n);
      for (size_t i = 0; i < n; ++i) residual[i] = 0.01f * x[(i * 7) % n];
      const size_t maxBytes = codec->maxEncodedBytes(n, context());

      // Plain encode.
      HostWire cpuWire(maxBytes);
      const EncodeResult cpu = codec->encode(x, cpuWire.span, context());
      DeviceArray<float> dx(x, offset);
      DeviceArray<std::byte> dWire(maxBytes);
      const EncodeResult dev = codec->encode(dx.span(), dWire.span(), context(), gpu());
      ASSERT_EQ(dev.wireBytes, cpu.wireBytes);
      EXPECT_EQ(dev.saturated, cpu.saturated);
      EXPECT_EQ(dev.entries, cpu.entries);
      EXPECT_EQ(dev.exactFallback, cpu.exactFallback);
      const std::vector<std::byte> cpuBytes(cpuWire.span.begin(), cpuWire.span.begin() + cpu.wireBytes);
      EXPECT_TRUE(sameBytes(dWire.get(cpu.wireBytes), cpuBytes));

      // Encode fused with error feedback: separate output, and in place (residualOut = residualIn).
      std::vector<float> cpuResidualOut(n);
      HostWire cpuWireEf(maxBytes);
      const EncodeResult cpuEf = codec->encodeWithResidual(x, residual, cpuResidualOut, cpuWireEf.span, context());
      const std::vector<std::byte> cpuEfBytes(cpuWireEf.span.begin(), cpuWireEf.span.begin() + cpuEf.wireBytes);
      {
        DeviceArray<float> dResidual(residual, offset), dResidualOut(n, offset);
        const EncodeResult devEf = codec->encodeWithResidual(dx.span(), dResidual.span(), dResidualOut.span(),
                                                             dWire.span(), context(), gpu());
        ASSERT_EQ(devEf.wireBytes, cpuEf.wireBytes);
        EXPECT_TRUE(sameBytes(dWire.get(cpuEf.wireBytes), cpuEfBytes));
        EXPECT_TRUE(sameBytes(dResidualOut.get(), cpuResidualOut));
        EXPECT_TRUE(sameBytes(dResidual.get(), residual));  // input untouched
      }
      {
        DeviceArray<float> dResidual(residual, offset);
        codec->encodeWithResidual(dx.span(), dResidual.span(), dResidual.span(), dWire.span(), context(), gpu());
        EXPECT_TRUE(sameBytes(dWire.get(cpuEf.wireBytes), cpuEfBytes));
        EXPECT_TRUE(sameBytes(dResidual.get(), cpuResidualOut));
      }

      // Decode the CPU's wire on the device: overwrite, and accumulate into a non-zero buffer.
      const std::vector<float> prior(n, 0.25f);
      std::vector<float> cpuOut(n, -7.0f), cpuAcc = prior;
      codec->decode(cpuBytes, cpuOut, DecodeMode::Overwrite);
      codec->decode(cpuBytes, cpuAcc, DecodeMode::Accumulate);
      DeviceArray<std::byte> dCpuWire(cpuBytes, 0);
      DeviceArray<float> dOut(std::vector<float>(n, -7.0f), offset), dAcc(prior, offset);
      codec->decode(dCpuWire.span(), dOut.span(), DecodeMode::Overwrite, gpu());
      codec->decode(dCpuWire.span(), dAcc.span(), DecodeMode::Accumulate, gpu());
      EXPECT_TRUE(sameBytes(dOut.get(), cpuOut));
      EXPECT_TRUE(sameBytes(dAcc.get(), cpuAcc));

      // A wire received at an odd device offset decodes the same (copied to an aligned buffer first).
      if (n > 0 && n <= 4097) {
        DeviceArray<std::byte> dOdd(cpuBytes, 3);
        DeviceArray<float> dOut2(n);
        codec->decode(dOdd.span(), dOut2.span(), DecodeMode::Overwrite, gpu());
        EXPECT_TRUE(sameBytes(dOut2.get(), cpuOut));
      }
    }
}

TEST_P(CodecParity, NonFiniteInputAndPoisonedResidualGiveTheCpuErrors) {
  auto codec = makeCompressor(GetParam());
  const size_t n = 5000;
  for (size_t bad : {size_t{0}, size_t{2047}, size_t{4999}}) {
    SCOPED_TRACE(::testing::Message() << GetParam() << " bad=" << bad);
    auto x = testInput(n, bad + 1);
    x[bad] = std::numeric_limits<float>::quiet_NaN();
    x[n - 1 - (bad % 7)] = std::numeric_limits<float>::infinity();  // a second one, later or equal
    DeviceArray<float> dx(x, 1);
    DeviceArray<std::byte> dWire(codec->maxEncodedBytes(n, context()));
    HostWire cpuWire(codec->maxEncodedBytes(n, context()));
    uint64_t cpuIndex = 0, devIndex = 1;
    try {
      codec->encode(x, cpuWire.span, context());
      ADD_FAILURE() << "CPU encode accepted NaN";
    } catch (const NonFiniteError& e) {
      cpuIndex = e.index();
    }
    try {
      codec->encode(dx.span(), dWire.span(), context(), gpu());
      ADD_FAILURE() << "CUDA encode accepted NaN";
    } catch (const NonFiniteError& e) {
      devIndex = e.index();
    }
    EXPECT_EQ(devIndex, cpuIndex);
  }
  // A finite gradient with a poisoned residual: the message blames the residual, at the same index.
  const auto g = testInput(n, 5);
  std::vector<float> e(n, 0.0f), out(n);
  e[321] = std::numeric_limits<float>::infinity();
  HostWire cpuWire(codec->maxEncodedBytes(n, context()));
  std::string cpuMessage, devMessage;
  try {
    codec->encodeWithResidual(g, e, out, cpuWire.span, context());
  } catch (const NonFiniteError& err) {
    cpuMessage = err.what();
  }
  DeviceArray<float> dg(g, 0), de(e, 0), dOut(n);
  DeviceArray<std::byte> dWire(codec->maxEncodedBytes(n, context()));
  try {
    codec->encodeWithResidual(dg.span(), de.span(), dOut.span(), dWire.span(), context(), gpu());
  } catch (const NonFiniteError& err) {
    devMessage = err.what();
  }
  ASSERT_FALSE(cpuMessage.empty());
  EXPECT_NE(devMessage.find("residual is poisoned"), std::string::npos) << devMessage;
  EXPECT_NE(devMessage.find("index 321"), std::string::npos) << devMessage;
}

// Flips bytes across the payload of a valid wire; whatever the CPU decoder says (accepts, or which
// DecodeError), the CUDA decoder says the same, and a rejected payload leaves the output untouched.
TEST_P(CodecParity, CorruptedPayloadsGetTheCpuVerdict) {
  auto codec = makeCompressor(GetParam());
  const size_t n = 3000;
  const auto x = testInput(n, 99);
  HostWire wire(codec->maxEncodedBytes(n, context()));
  const EncodeResult r = codec->encode(x, wire.span, context());
  const std::vector<std::byte> good(wire.span.begin(), wire.span.begin() + r.wireBytes);
  const size_t payload = r.wireBytes - kWireHeaderBytes;
  for (size_t k = 0; k < 40 && payload > 0; ++k) {
    std::vector<std::byte> bad = good;
    const size_t at = kWireHeaderBytes + (k * 7919) % payload;
    bad[at] = static_cast<std::byte>(0xff);
    if (k % 2) bad[kWireHeaderBytes + (k * 104729) % payload] = static_cast<std::byte>(0x80);
    SCOPED_TRACE(::testing::Message() << GetParam() << " corruption " << k << " at byte " << at);
    std::string cpuVerdict = "accepted", devVerdict = "accepted";
    std::vector<float> out(n, 1.5f);
    try {
      codec->decode(bad, out, DecodeMode::Overwrite);
    } catch (const DecodeError& e) {
      cpuVerdict = e.what();
    }
    DeviceArray<std::byte> dBad(bad, 0);
    DeviceArray<float> dOut(std::vector<float>(n, 1.5f), 0);
    try {
      codec->decode(dBad.span(), dOut.span(), DecodeMode::Overwrite, gpu());
    } catch (const DecodeError& e) {
      devVerdict = e.what();
    }
    // Messages carry the source location: compare from the codec's own words on.
    auto tail = [](const std::string& m) { return m.substr(m.find(": ") == std::string::npos ? 0 : m.find(": ")); };
    EXPECT_EQ(tail(devVerdict), tail(cpuVerdict));
    if (cpuVerdict != "accepted") {
      EXPECT_TRUE(sameBytes(dOut.get(), std::vector<float>(n, 1.5f)));
    } else {
      EXPECT_TRUE(sameBytes(dOut.get(), out));
    }
  }
}

// Inputs at the edges of fp32 (docs/reliability.md rows 25, 26): blocks reaching +-FLT_MAX, qsgd bucket
// norms beyond FLT_MAX and below 1e-38, subnormal blocks. The device must raise scales, cap norms and
// normalize ratios exactly as the CPU does (kernels/scalar/scale_limits.h), so the bytes stay equal and
// every decoded value is finite.
TEST_P(CodecParity, RangeEdgesGiveTheCpuBytesAndFiniteValues) {
  auto codec = makeCompressor(GetParam());
  const size_t n = 1500;
  for (const float magnitude : {3e38f, 1e-39f, 1e-44f, 1e31f}) {
    SCOPED_TRACE(::testing::Message() << GetParam() << " magnitude=" << magnitude);
    std::vector<float> x = testInput(n, 5);
    for (size_t i = 0; i < n; ++i) x[i] = std::max(-FLT_MAX, std::min(FLT_MAX, x[i] * magnitude));
    if (magnitude > 1e37f)
      for (size_t i = 0; i < n; i += 7) x[i] = i % 2 ? FLT_MAX : -FLT_MAX;
    const size_t maxBytes = codec->maxEncodedBytes(n, context());
    HostWire cpuWire(maxBytes);
    const EncodeResult cpu = codec->encode(x, cpuWire.span, context());
    DeviceArray<float> dx(x, 0);
    DeviceArray<std::byte> dWire(maxBytes);
    const EncodeResult dev = codec->encode(dx.span(), dWire.span(), context(), gpu());
    ASSERT_EQ(dev.wireBytes, cpu.wireBytes);
    EXPECT_EQ(dev.saturated, cpu.saturated);
    const std::vector<std::byte> cpuBytes(cpuWire.span.begin(), cpuWire.span.begin() + cpu.wireBytes);
    EXPECT_TRUE(sameBytes(dWire.get(cpu.wireBytes), cpuBytes));
    DeviceArray<float> dOut(std::vector<float>(n, -7.0f), 0);
    codec->decode(dWire.span().first(cpu.wireBytes), dOut.span(), DecodeMode::Overwrite, gpu());
    for (float v : dOut.get()) ASSERT_TRUE(std::isfinite(v));
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecParity, ::testing::ValuesIn(specs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name;
                           for (char c : param.param) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(CodecOnDevice, MissingDeviceIndexIsABackendError) {
  auto codec = makeCompressor("fp16");
  ExecContext e = gpu();
  e.cudaDevice = 1000;
  DeviceArray<float> x(16);
  DeviceArray<std::byte> wire(codec->maxEncodedBytes(16));
  EXPECT_THROW(codec->encode(x.span(), wire.span(), {}, e), BackendUnavailable);
}

}  // namespace
}  // namespace gradcomp
