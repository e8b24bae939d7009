// The CUDA dispatch seen from a machine without a GPU (CI): asking any codec to work on a CUDA buffer
// is a BackendUnavailable that names the codec and says why -- "this build has no CUDA kernels" in a
// CPU-only build, "no CUDA device is available" in a CUDA build on a machine without one -- and never
// touches the buffers (they are host memory here, which a CUDA path would fault on). Where a device
// is present these paths are exercised for real by gradcomp_cuda_codec_tests instead.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "compressors/cuda_paths.h"
#include "compressors/registry.h"
#include "core/error.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

bool deviceAnswers() {
  try {
    cudapath::requireDevice({Device::Cuda, 0, nullptr, 1}, "none", "probe");
    return true;
  } catch (const BackendUnavailable&) {
    return false;
  }
}

std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const BackendUnavailable& e) {
    return e.what();
  }
  return "(no BackendUnavailable)";
}

TEST(DeviceDispatch, EveryCodecRefusesCudaBuffersWithTheReason) {
  if (deviceAnswers()) GTEST_SKIP() << "a CUDA device answers: gradcomp_cuda_codec_tests covers the CUDA paths here";
  const std::string reason = cudapath::compiledIn() ? "no CUDA device is available" : "this build has no CUDA kernels";
  ExecContext gpu;
  gpu.device = Device::Cuda;
  for (const auto& name : codecNames()) {
    SCOPED_TRACE(name);
    auto codec = makeCompressor(name);
    const std::vector<float> x(100, 0.5f);
    std::vector<float> e(100, 0.0f), out(100);
    testing::WireBuffer wire(codec->maxEncodedBytes(100));
    const EncodeResult r = codec->encode(x, wire.span(codec->maxEncodedBytes(100)), {});  // a valid host wire
    for (const std::string& message :
         {refusal([&] { codec->encode(x, wire.span(codec->maxEncodedBytes(100)), {}, gpu); }),
          refusal([&] { codec->encodeWithResidual(x, e, out, wire.span(codec->maxEncodedBytes(100)), {}, gpu); }),
          refusal([&] { codec->decode(wire.span(r.wireBytes), out, DecodeMode::Overwrite, gpu); })}) {
      EXPECT_NE(message.find(reason), std::string::npos) << message;
      EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
    }
  }
}

TEST(DeviceDispatch, TheCpuPathIsUnchangedByAGpuBuild) {
  // The dispatch only branches on ExecContext::device: a default context still runs the CPU kernels.
  auto codec = makeCompressor("int8");
  const std::vector<float> x = {1.0f, -0.5f, 0.25f, 0.0f};
  testing::WireBuffer wire(codec->maxEncodedBytes(4));
  const EncodeResult r = codec->encode(x, wire.span(codec->maxEncodedBytes(4)), {});
  std::vector<float> out(4);
  codec->decode(wire.span(r.wireBytes), out, DecodeMode::Overwrite);
  const float unit = 1.0f / 127.0f;  // the decoder's code * fp32(1 / scale)
  EXPECT_EQ(out, (std::vector<float>{127 * unit, -64 * unit, 32 * unit, 0.0f}));
}

}  // namespace
}  // namespace gradcomp
