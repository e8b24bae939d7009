// gradcomp._C.Codec: one codec from its spec string, the same object C++ callers get from
// makeCompressor, so Python and C++ write the same bytes. The *_into methods take preallocated outputs
// (what the torch layer uses: buffers from torch's allocator); gradcomp.Codec in Python adds allocation.
// The GIL is released around every kernel call.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>

#include "bindings.h"
#include "compressors/randomk_values.h"
#include "compressors/registry.h"
#include "core/error.h"
#include "encode_context.h"
#include "tensor_args.h"

namespace gradcomp::python {

namespace {

using namespace nb::literals;

nb::dict traitsDict(const CompressorTraits& t) {
  nb::dict d;
  d["lossless"] = t.lossless;
  d["fixed_size"] = t.fixedSize;
  d["sparse"] = t.sparse;
  d["shared_indices"] = t.sharedIndices;
  d["stochastic"] = t.stochastic;
  d["needs_shared_seed"] = t.needsSharedSeed;
  d["reencodable"] = t.reencodable;
  return d;
}

nb::dict headerDict(const WireHeader& h) {
  nb::dict d;
  d["codec"] = codecIdName(h.codec);
  d["codec_id"] = h.codec;
  d["version"] = h.version;
  d["flags"] = h.flags;
  d["block_size"] = h.blockSize;
  d["num_elements"] = h.numElements;
  d["count"] = h.count;
  d["payload_bytes"] = h.payloadBytes;
  d["wire_bytes"] = kWireHeaderBytes + h.payloadBytes;
  d["param"] = h.param;
  return d;
}

// What an encode wrote, as the plain tuple (wire_bytes, saturated, entries, exact_fallback): the Python
// wrapper unpacks it in one step, where four attribute reads of an EncodeResult cost a small tensor's
// encode 0.2-0.3 us more.
nb::tuple asTuple(const EncodeResult& r) {
  return nb::make_tuple(r.wireBytes, r.saturated, r.entries, r.exactFallback);
}

}  // namespace

void bindCodec(nb::module_& m) {
  nb::class_<EncodeResult>(m, "EncodeResult", "What one encode wrote.")
      .def_ro("wire_bytes", &EncodeResult::wireBytes, "bytes of the wire buffer written (header included)")
      .def_ro("saturated", &EncodeResult::saturated, "finite values clamped to the format's range")
      .def_ro("entries", &EncodeResult::entries, "sparse codecs: entries on the wire")
      .def_ro("exact_fallback", &EncodeResult::exactFallback,
              "threshold codec: the estimate overshot, exact top-k was used")
      .def("__repr__", [](const EncodeResult& r) {
        return detail::concat("EncodeResult(wire_bytes=", r.wireBytes, ", saturated=", r.saturated,
                              ", entries=", r.entries, ", exact_fallback=", r.exactFallback ? "True" : "False", ")");
      });

  nb::class_<Compressor>(m, "_Codec", "A codec built from a spec string (see gradcomp.Codec).")
      .def_prop_ro("name", [](const Compressor& c) { return std::string(c.name()); })
      .def_prop_ro("spec", [](const Compressor& c) { return c.spec().toString(); }, "the spec as written")
      .def_prop_ro("canonical_spec", &Compressor::canonicalSpec,
                   "the spec in normal form, defaults included: equal for equivalent spellings")
      .def_prop_ro("traits", [](const Compressor& c) { return traitsDict(c.traits()); })
      .def(
          "max_encoded_bytes",
          [](const Compressor& c, size_t n, uint64_t k) {
            EncodeContext ctx;
            ctx.kOverride = k;
            return c.maxEncodedBytes(n, ctx);
          },
          "n"_a, "k"_a = 0, "An upper bound on the wire bytes for n elements (k: sparse entries override).")
      .def("sparse_entries", &Compressor::sparseEntries, "n"_a, "Entries a sparse codec sends for n elements.")
      .def("variance_bound", [](const Compressor& c, size_t n) { return c.varianceBound(n); }, "n"_a,
           "omega with E||C(x) - x||^2 <= omega ||x||^2 for an unbiased stochastic codec on n elements; 0 for "
           "the deterministic and the biased ones.")
      .def(
          "encode_into",
          [](const Compressor& c, FloatsIn x, BytesOut out, uint64_t seed, uint32_t rank, uint32_t step,
             uint32_t tensorId, uint64_t k, std::optional<uintptr_t> stream, int threads) {
            const ExecContext exec = DeviceOfCall("encode", stream, threads).add("x", x).add("out", out).exec();
            const EncodeResult r = [&] {
              GilReleaseForCall release(exec, x.size());
              return c.encode(view(x), view(out), encodeContext(seed, rank, step, tensorId, k), exec);
            }();
            return asTuple(r);
          },
          "x"_a.noconvert(), "out"_a.noconvert(), nb::kw_only(), "seed"_a = 0, "rank"_a = 0, "step"_a = 0,
          "tensor_id"_a = 0, "k"_a = 0, "stream"_a = nb::none(), "threads"_a = 1,
          "Encodes x (float32, contiguous) into out (uint8, at least max_encoded_bytes); returns (wire_bytes, "
          "saturated, entries, exact_fallback).")
      .def(
          "encode_with_residual_into",
          [](const Compressor& c, FloatsIn grad, FloatsIn residualIn, FloatsOut residualOut, BytesOut out,
             uint64_t seed, uint32_t rank, uint32_t step, uint32_t tensorId, uint64_t k,
             std::optional<uintptr_t> stream, int threads) {
            const ExecContext exec = DeviceOfCall("encode_with_residual", stream, threads)
                                         .add("grad", grad)
                                         .add("residual_in", residualIn)
                                         .add("residual_out", residualOut)
                                         .add("out", out)
                                         .exec();
            const EncodeResult r = [&] {
              GilReleaseForCall release(exec, grad.size());
              return c.encodeWithResidual(view(grad), view(residualIn), view(residualOut), view(out),
                                          encodeContext(seed, rank, step, tensorId, k), exec);
            }();
            return asTuple(r);
          },
          "grad"_a.noconvert(), "residual_in"_a.noconvert(), "residual_out"_a.noconvert(), "out"_a.noconvert(),
          nb::kw_only(), "seed"_a = 0, "rank"_a = 0, "step"_a = 0, "tensor_id"_a = 0, "k"_a = 0,
          "stream"_a = nb::none(), "threads"_a = 1,
          "Writes C(grad + residual_in) to out and residual_out = (grad + residual_in) - decode(out); "
          "residual_out may be residual_in. Returns what encode_into returns.")
      .def(
          "decode_into",
          [](const Compressor& c, BytesIn wire, FloatsOut out, bool accumulate, std::optional<uintptr_t> stream,
             int threads) {
            const ExecContext exec = DeviceOfCall("decode", stream, threads).add("wire", wire).add("out", out).exec();
            GilReleaseForCall release(exec, out.size());
            c.decode(view(wire), view(out), accumulate ? DecodeMode::Accumulate : DecodeMode::Overwrite, exec);
          },
          "wire"_a.noconvert(), "out"_a.noconvert(), nb::kw_only(), "accumulate"_a = false,
          "stream"_a = nb::none(), "threads"_a = 1,
          "Validates wire, then decodes it into out (overwrite, or add in fp32 with accumulate=True).")
      .def(
          "inspect",
          [](const Compressor& c, BytesIn wire) {
            requireHost("inspect", "wire", wire);
            return headerDict(c.inspect(view(wire)));
          },
          "wire"_a.noconvert(), "The validated header of a host wire buffer, as a dict.")
      .def(
          "randomk_values",
          [](const Compressor& c, BytesOut wire) {
            GRADCOMP_CHECK_ARG(c.id() == CodecId::RandomK, "randomk_values: codec '", c.canonicalSpec(),
                               "' is not randomk");
            requireHost("randomk_values", "wire", wire);
            const auto w = view(wire);
            const RandomKValues v = randomKValues(w);
            return nb::make_tuple(static_cast<size_t>(v.data - w.data()), v.count, v.fp16);
          },
          "wire"_a.noconvert(),
          "randomk: (byte offset, count, fp16) of the values section, which ranks sharing the seed can sum "
          "element by element.");

  // The same calls timed inside C++ (no Python between them), for the binding-overhead benchmark
  // (scripts/bench-python-codecs): the ratio of a Python call to these, on the same buffers, is what the
  // binding costs.
  m.def(
      "cpp_encode_seconds",
      [](const Compressor& c, FloatsIn x, BytesOut out, uint64_t seed) {
        nb::gil_scoped_release release;
        const auto t0 = std::chrono::steady_clock::now();
        c.encode(view(x), view(out), encodeContext(seed, 0, 0, 0));
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      "codec"_a, "x"_a.noconvert(), "out"_a.noconvert(), "seed"_a = 0);
  m.def(
      "cpp_decode_seconds",
      [](const Compressor& c, BytesIn wire, FloatsOut out) {
        nb::gil_scoped_release release;
        const auto t0 = std::chrono::steady_clock::now();
        c.decode(view(wire), view(out), DecodeMode::Overwrite);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      "codec"_a, "wire"_a.noconvert(), "out"_a.noconvert());

  m.def(
      "make_codec", [](const std::string& spec) { return makeCompressor(spec); }, "spec"_a,
      "A codec from its spec string; InvalidArgument names an unknown codec or parameter.");
  m.def("codecs", &codecNames, "Every registered codec name, in registry order.");
  m.def(
      "decode_any",
      [](BytesIn wire, FloatsOut out, bool accumulate) {
        const auto w = view(wire);
        const auto o = view(out);
        requireHost("decode_any", "wire", wire);
        requireHost("decode_any", "out", out);
        nb::gil_scoped_release release;
        decodeAnyWire(w, o, accumulate ? DecodeMode::Accumulate : DecodeMode::Overwrite);
      },
      "wire"_a.noconvert(), "out"_a.noconvert(), nb::kw_only(), "accumulate"_a = false,
      "Decodes any host wire buffer with the codec its header names.");
  m.def(
      "inspect_any",
      [](BytesIn wire) {
        requireHost("inspect_any", "wire", wire);
        return headerDict(parseHeader(view(wire)));
      }, "wire"_a.noconvert(),
      "The header of any host wire buffer (generic checks only), as a dict.");
}

}  // namespace gradcomp::python
