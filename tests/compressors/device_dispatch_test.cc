// The CUDA dispatch's refusals: asking any codec to work on a CUDA buffer it cannot use is a
// BackendUnavailable that names the codec and says why -- "this build has no CUDA kernels" in a
// CPU-only build, "no CUDA device is available" in a CUDA build on a machine without one (CI), a
// nonexistent device index where one is present -- and never touches the buffers (host memory here,
// which a CUDA path would fault on). The working CUDA paths are gradcomp_cuda_codec_tests' subject.
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

// Three machines, three reasons: no CUDA in the build; CUDA but no device (CI); a device, asked for
// one that does not exist. None of them touches the (host) buffers.
TEST(DeviceDispatch, EveryCodecRefusesCudaBuffersWithTheReason) {
  ExecContext gpu;
  gpu.device = Device::Cuda;
  std::string reason = "this build has no CUDA kernels";
  if (cudapath::compiledIn()) reason = "no CUDA device is available";
  if (deviceAnswers()) {
    gpu.cudaDevice = 1 << 20;
    reason = "CUDA device 1048576 does not exist";
  }
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
