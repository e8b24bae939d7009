// gradcomp._C.ErrorFeedback: the C++ policies (none, ef, ef21, ef21-sgdm, dgc) with their state, keyed by tensor id
// as in C++. The state can be read and replaced per tensor (state / set_state), saved and loaded in the
// C++ checkpoint format (save / load), and pickled (so torch.save of a hook state carries it).
// One mutex per object: the DDP hook calls it from its worker thread with the GIL released, and a
// second Python thread must wait rather than race on the state.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.h"
#include "compressors/dgc_warmup.h"
#include "compressors/error_feedback.h"
#include "core/error.h"
#include "encode_context.h"
#include "tensor_args.h"

namespace gradcomp::python {

namespace {

using namespace nb::literals;

class PyErrorFeedback {
 public:
  explicit PyErrorFeedback(const std::string& spec) : spec_(spec), policy_(ErrorFeedback::make(spec)) {
    policy_->setWarningSink([this](const std::string& message) { pendingWarnings_.push_back(message); });
  }

  ErrorFeedback& policy() { return *policy_; }
  const std::string& spec() const { return spec_; }
  std::mutex& mutex() { return mutex_; }

  // Warnings collected while the GIL was released, issued once it is held again.
  void flushWarnings() {
    std::vector<std::string> messages;
    {
      std::lock_guard lock(mutex_);
      messages.swap(pendingWarnings_);
    }
    for (const auto& w : messages)
      if (PyErr_WarnEx(PyExc_RuntimeWarning, w.c_str(), 1) != 0) throw nb::python_error();
  }

 private:
  std::string spec_;
  std::unique_ptr<ErrorFeedback> policy_;
  std::mutex mutex_;
  std::vector<std::string> pendingWarnings_;
};

template <typename Fn>
auto locked(PyErrorFeedback& self, Fn&& fn) {
  struct Flush {
    PyErrorFeedback& s;
    ~Flush() noexcept(false) {
      if (!std::uncaught_exceptions()) s.flushWarnings();
    }
  } flush{self};
  nb::gil_scoped_release release;
  std::lock_guard lock(self.mutex());
  return fn(self.policy());
}

nb::bytes saved(PyErrorFeedback& self) {
  std::string bytes = locked(self, [](ErrorFeedback& p) {
    std::ostringstream out;
    p.save(out);
    return std::move(out).str();
  });
  return nb::bytes(bytes.data(), bytes.size());
}

void loadInto(PyErrorFeedback& self, nb::bytes data) {
  std::string bytes(data.c_str(), data.size());
  locked(self, [&](ErrorFeedback& p) {
    std::istringstream in(bytes);
    p.load(in);
    return 0;
  });
}

}  // namespace

void bindErrorFeedback(nb::module_& m) {
  nb::class_<CompressOutcome>(m, "CompressOutcome", "What one error-feedback compress did.")
      .def_ro("encoded", &CompressOutcome::encoded)
      .def_ro("skipped", &CompressOutcome::skipped, "non-finite gradient under nonfinite=skip: zeros were sent")
      .def_ro("residual_reset", &CompressOutcome::residualReset,
              "the state was reset (non-finite or over the limit) before this step");

  nb::class_<PyErrorFeedback>(m, "ErrorFeedback",
                              "An error-feedback policy: none, ef, ef21, ef21-sgdm:eta=.., dgc:momentum=..,clip=..,warmup=.. "
                              "(each also nonfinite=error|skip, shape=error|reset, limit=..).")
      .def(nb::init<const std::string&>(), "spec"_a)
      .def_prop_ro("name", [](PyErrorFeedback& s) { return s.policy().name(); })
      .def_prop_ro("spec", &PyErrorFeedback::spec)
      .def_prop_ro("canonical_spec", [](PyErrorFeedback& s) { return s.policy().canonicalSpec(); })
      .def_prop_ro("num_buffers", [](PyErrorFeedback& s) { return s.policy().numBuffers(); },
                   "state buffers per tensor: 0 (none), 1 (ef, ef21), 2 (dgc: momentum u, accumulation v)")
      .def_prop_ro("sliceable", [](PyErrorFeedback& s) { return s.policy().sliceable(); },
                   "whether compress_slice is supported (elementwise state: none, ef)")
      .def_prop_ro("resets", [](PyErrorFeedback& s) { return s.policy().resets(); },
                   "how many times a state was reset (non-finite or over the limit)")
      .def(
          "max_encoded_bytes",
          [](PyErrorFeedback& s, const Compressor& codec, size_t n, uint32_t step) {
            return s.policy().maxEncodedBytes(codec, n, encodeContext(0, 0, step, 0));
          },
          "codec"_a, "n"_a, nb::kw_only(), "step"_a = 0, "The wire bytes to reserve for n elements at this step.")
      .def(
          "compress_into",
          [](PyErrorFeedback& s, const Compressor& codec, FloatsIn grad, BytesOut out, uint64_t seed, uint32_t rank,
             uint32_t step, uint32_t tensorId) {
            requireHost("ErrorFeedback.compress", "grad", grad);
            requireHost("ErrorFeedback.compress", "out", out);
            return locked(s, [&](ErrorFeedback& p) {
              return p.compress(codec, view(grad), view(out), encodeContext(seed, rank, step, tensorId));
            });
          },
          "codec"_a, "grad"_a.noconvert(), "out"_a.noconvert(), nb::kw_only(), "seed"_a = 0, "rank"_a = 0,
          "step"_a = 0, "tensor_id"_a = 0,
          "Compresses tensor tensor_id's gradient under this policy into out; the state is untouched when "
          "the gradient is non-finite (NonFiniteError, or zeros sent under nonfinite=skip).")
      .def(
          "compress_slice_into",
          [](PyErrorFeedback& s, const Compressor& codec, FloatsIn grad, BytesOut out, size_t offset,
             size_t fullLength, uint64_t seed, uint32_t rank, uint32_t step, uint32_t tensorId) {
            requireHost("ErrorFeedback.compress_slice", "grad", grad);
            requireHost("ErrorFeedback.compress_slice", "out", out);
            return locked(s, [&](ErrorFeedback& p) {
              return p.compressSlice(codec, view(grad), view(out), encodeContext(seed, rank, step, tensorId), offset,
                                     fullLength);
            });
          },
          "codec"_a, "grad"_a.noconvert(), "out"_a.noconvert(), nb::kw_only(), "offset"_a, "full_length"_a,
          "seed"_a = 0, "rank"_a = 0, "step"_a = 0, "tensor_id"_a = 0,
          "Compresses elements [offset, offset + len(grad)) of a tensor of full_length elements.")
      .def(
          "finish",
          [](PyErrorFeedback& s, uint32_t tensorId, FloatsOut reduced) {
            requireHost("ErrorFeedback.finish", "reduced", reduced);
            locked(s, [&](ErrorFeedback& p) {
              p.finish(tensorId, view(reduced));
              return 0;
            });
          },
          "tensor_id"_a, "reduced"_a.noconvert(),
          "Turns the all-reduced decoded sum into the update (identity except ef21: H += sum; reduced = H).")
      .def(
          "state",
          [](PyErrorFeedback& s, uint32_t tensorId, int which) {
            std::vector<float> copy = locked(s, [&](ErrorFeedback& p) {
              GRADCOMP_CHECK_ARG(which >= 0 && which < p.numBuffers(), "state: buffer ", which, " out of range; '",
                                 p.name(), "' keeps ", p.numBuffers());
              const auto b = p.stateBuffer(tensorId, which);
              return std::vector<float>(b.begin(), b.end());
            });
            auto* data = new std::vector<float>(std::move(copy));
            nb::capsule owner(data, [](void* v) noexcept { delete static_cast<std::vector<float>*>(v); });
            return nb::ndarray<nb::numpy, float, nb::ndim<1>>(data->data(), {data->size()}, owner);
          },
          "tensor_id"_a, "which"_a = 0, "A copy of state buffer `which` of a tensor (empty if it has none).")
      .def(
          "set_state",
          [](PyErrorFeedback& s, uint32_t tensorId, std::vector<FloatsIn> buffers) {
            std::vector<std::span<const float>> views;
            for (const auto& b : buffers) {
              requireHost("ErrorFeedback.set_state", "buffers", b);
              views.push_back(view(b));
            }
            locked(s, [&](ErrorFeedback& p) {
              p.setState(tensorId, views);
              return 0;
            });
          },
          "tensor_id"_a, "buffers"_a, "Replaces a tensor's state (num_buffers float32 arrays of one length).")
      .def("tensor_ids", [](PyErrorFeedback& s) { return locked(s, [](ErrorFeedback& p) { return p.tensorIds(); }); })
      .def("reset", [](PyErrorFeedback& s, uint32_t id) { locked(s, [&](ErrorFeedback& p) { p.reset(id); return 0; }); },
           "tensor_id"_a)
      .def("reset_all", [](PyErrorFeedback& s) { locked(s, [](ErrorFeedback& p) { p.resetAll(); return 0; }); })
      .def("save", &saved, "The state in gradcomp's checkpoint format (what the C++ trainer writes).")
      .def("load", &loadInto, "data"_a, "Restores save()'s bytes; InvalidArgument if they are another policy's.")
      .def("__getstate__", [](PyErrorFeedback& s) { return nb::make_tuple(s.spec(), saved(s)); })
      .def("__setstate__", [](PyErrorFeedback& s, const nb::tuple& t) {
        GRADCOMP_CHECK_ARG(t.size() == 2, "ErrorFeedback.__setstate__: expected (spec, state), got ", t.size(),
                           " items");
        new (&s) PyErrorFeedback(nb::cast<std::string>(t[0]));
        loadInto(s, nb::cast<nb::bytes>(t[1]));
      })
      .def("__repr__", [](PyErrorFeedback& s) { return "ErrorFeedback('" + s.policy().canonicalSpec() + "')"; });

  // The one warm-up rule (compressors/dgc_warmup.h) for the hook's per-part counts, so that they cannot
  // drift from the C++ policy's.
  m.def("dgc_warmup_entries", &dgcWarmupEntries, "own_entries"_a, "n"_a, "step"_a, "warmup"_a,
        "DGC's warm-up: the entries a sparse codec that sends own_entries of n sends at step (0-based) of a "
        "warmup-step warm-up (a quarter, then 1/16, 1/64, 1/256 of n over four equal stages, never fewer than "
        "its own); 0 (its own k) after the warm-up or for a dense codec (own_entries 0).");
}

}  // namespace gradcomp::python
