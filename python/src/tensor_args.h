// How arrays cross from Python: any object with __dlpack__ (torch tensors, numpy arrays, CuPy, JAX) or
// the buffer protocol, zero-copy. nanobind's implicit conversion is switched off on every array argument
// (.noconvert() in the bindings), so a float64 or strided array is a TypeError instead of a silent copy
// that an in-place decode would write into and drop.
//
// Every array of one call must live on the same device. On a CUDA device the caller names the stream
// (an integer cudaStream_t, e.g. torch.cuda.current_stream().cuda_stream): nanobind does not synchronise
// streams on import and gradcomp enqueues on exactly the stream it is handed, so there is no default to
// guess wrong.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "core/exec_context.h"

namespace gradcomp::python {

namespace nb = nanobind;

using FloatsIn = nb::ndarray<const float, nb::c_contig>;
using FloatsOut = nb::ndarray<float, nb::c_contig>;
using BytesIn = nb::ndarray<const uint8_t, nb::c_contig>;
using BytesOut = nb::ndarray<uint8_t, nb::c_contig>;

inline std::span<const float> view(const FloatsIn& a) { return {a.data(), a.size()}; }
inline std::span<float> view(const FloatsOut& a) { return {a.data(), a.size()}; }
inline std::span<const std::byte> view(const BytesIn& a) {
  return {reinterpret_cast<const std::byte*>(a.data()), a.size()};
}
inline std::span<std::byte> view(const BytesOut& a) { return {reinterpret_cast<std::byte*>(a.data()), a.size()}; }

// Where one call runs, from its arrays' devices and the caller's stream; throws InvalidArgument when the
// arrays disagree, a CUDA array comes without a stream, or an array is on a device gradcomp has no
// kernels for. `what` names the call in the message.
class DeviceOfCall {
 public:
  DeviceOfCall(const char* what, std::optional<uintptr_t> stream, int cpuThreads);
  template <typename Array>
  DeviceOfCall& add(const char* argument, const Array& a) {
    if (a.is_valid()) addDevice(argument, a.device_type(), a.device_id());
    return *this;
  }
  ExecContext exec() const;

 private:
  void addDevice(const char* argument, int deviceType, int deviceId);

  const char* what_;
  std::optional<uintptr_t> stream_;
  int cpuThreads_;
  const char* first_ = nullptr;
  int deviceType_ = 0;
  int deviceId_ = 0;
};

// Releases the GIL for the length of a call that is long enough for another Python thread to use it:
// a device call (it may wait on its stream), or one over at least 64K values. A small host call keeps
// it: the call is over sooner than another thread could be scheduled onto the released GIL, and the
// release / re-acquire pair is per-call cost a small tensor's encode pays on top of a 1 us call.
class GilReleaseForCall {
 public:
  GilReleaseForCall(const ExecContext& exec, size_t values) {
    if (exec.device != Device::Cpu || values >= (size_t{1} << 16)) release_.emplace();
  }

 private:
  std::optional<nb::gil_scoped_release> release_;
};

// Host-only calls (header inspection): InvalidArgument when the array is not in host memory.
void requireHost(const char* what, const char* argument, int deviceType);
template <typename Array>
void requireHost(const char* what, const char* argument, const Array& a) {
  requireHost(what, argument, a.device_type());
}

}  // namespace gradcomp::python
