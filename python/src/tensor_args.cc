#include "tensor_args.h"

#include "core/error.h"

namespace gradcomp::python {

namespace {
const char* deviceName(int type) {
  if (type == nb::device::cpu::value) return "cpu";
  if (type == nb::device::cuda::value) return "cuda";
  if (type == nb::device::cuda_host::value) return "cuda_host";
  if (type == nb::device::cuda_managed::value) return "cuda_managed";
  if (type == nb::device::rocm::value) return "rocm";
  if (type == nb::device::metal::value) return "metal";
  return "another device";
}
}  // namespace

DeviceOfCall::DeviceOfCall(const char* what, std::optional<uintptr_t> stream, int cpuThreads)
    : what_(what), stream_(stream), cpuThreads_(cpuThreads) {
  GRADCOMP_CHECK_ARG(cpuThreads >= 1 && cpuThreads <= 1024, what_, ": threads must be in [1, 1024], got ",
                     cpuThreads);
}

void DeviceOfCall::addDevice(const char* argument, int deviceType, int deviceId) {
  // Pinned host memory is host memory: the CPU kernels read it directly.
  if (deviceType == nb::device::cuda_host::value) deviceType = nb::device::cpu::value;
  GRADCOMP_CHECK_ARG(deviceType == nb::device::cpu::value || deviceType == nb::device::cuda::value, what_, ": '",
                     argument, "' is on ", deviceName(deviceType), "; gradcomp runs on cpu and cuda arrays");
  if (!first_) {
    first_ = argument;
    deviceType_ = deviceType;
    deviceId_ = deviceId;
    return;
  }
  GRADCOMP_CHECK_ARG(deviceType == deviceType_ && deviceId == deviceId_, what_, ": '", argument, "' is on ",
                     deviceName(deviceType), ":", deviceId, " but '", first_, "' is on ", deviceName(deviceType_),
                     ":", deviceId_, "; every array of one call must be on the same device");
}

ExecContext DeviceOfCall::exec() const {
  ExecContext exec;
  exec.cpuThreads = cpuThreads_;
  if (first_ && deviceType_ == nb::device::cuda::value) {
    GRADCOMP_CHECK_ARG(stream_.has_value(), what_, ": the arrays are on cuda:", deviceId_,
                       " but no stream was given; pass stream=torch.cuda.current_stream().cuda_stream "
                       "(gradcomp enqueues on the stream it is handed and never guesses one)");
    exec.device = Device::Cuda;
    exec.cudaDevice = deviceId_;
    exec.cudaStream = reinterpret_cast<void*>(*stream_);
  }
  return exec;
}

void requireHost(const char* what, const char* argument, int deviceType) {
  GRADCOMP_CHECK_ARG(deviceType == nb::device::cpu::value || deviceType == nb::device::cuda_host::value, what,
                     ": '", argument, "' is on ", deviceName(deviceType),
                     "; this call reads host memory (copy the buffer to the cpu first)");
}

}  // namespace gradcomp::python
