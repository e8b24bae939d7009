// encode_parts_into / decode_parts_into: one call for every tensor of a message. The torch layer sends
// each parameter (or parameter segment) as its own wire, so that its bytes never depend on the bucket it
// shares; a bucket of a transformer has hundreds of them, and one Python call each (argument conversion,
// DLPack export of every slice) cost more than the kernels. Here the loop runs in C++ over one export of
// the buffer, without the GIL.
//
// A message is [32-byte header, written by the caller][wire][wire]..., each wire 16-byte aligned and
// self-describing. `parts` is an int64 array of rows (start, end, tensor id, lossless): lossless parts use
// the `exact` codec (fp32, `none`) and no residual. With scale_auto (the hook's "ef:scale=auto"), a part
// whose codec is not contractive on its size (variance bound omega >= 1) goes through the same scaled
// step as the C++ policy (compressors/scaled_error_feedback.h); the others take the fused encode.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "compressors/compressor.h"
#include "compressors/scaled_error_feedback.h"
#include "core/error.h"
#include "encode_context.h"
#include "tensor_args.h"

namespace gradcomp::python {

namespace {

using namespace nb::literals;
using Parts = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig>;
using Entries = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig>;

constexpr size_t align16(size_t n) { return (n + 15) / 16 * 16; }

struct PartRow {
  size_t start, end;
  uint32_t tensorId;
  bool lossless;
};

std::vector<PartRow> rowsOf(const Parts& parts, size_t numel, const char* what) {
  requireHost(what, "parts", parts);
  GRADCOMP_CHECK_ARG(parts.shape(1) == 4, what, ": parts must have 4 columns (start, end, tensor id, lossless), got ",
                     parts.shape(1));
  std::vector<PartRow> rows(parts.shape(0));
  const int64_t* p = parts.data();
  for (size_t i = 0; i < rows.size(); ++i, p += 4) {
    GRADCOMP_CHECK_ARG(p[0] >= 0 && p[0] <= p[1] && static_cast<uint64_t>(p[1]) <= numel, what, ": part ", i,
                       " covers [", p[0], ", ", p[1], ") of a buffer of ", numel, " elements");
    GRADCOMP_CHECK_ARG(p[2] >= 0 && p[2] <= 0xFFFFFFFFll, what, ": part ", i, " has tensor id ", p[2]);
    rows[i] = {static_cast<size_t>(p[0]), static_cast<size_t>(p[1]), static_cast<uint32_t>(p[2]), p[3] != 0};
  }
  return rows;
}

// The entries each part's sparse codec sends (0: its own k), one per row; all 0 when not given.
std::vector<uint64_t> entriesOf(const std::optional<Entries>& entries, size_t rows, const char* what) {
  std::vector<uint64_t> ks(rows, 0);
  if (!entries) return ks;
  requireHost(what, "entries", *entries);
  GRADCOMP_CHECK_ARG(entries->shape(0) == rows, what, ": entries has ", entries->shape(0), " values for ", rows,
                     " parts");
  for (size_t i = 0; i < rows; ++i) {
    const int64_t k = entries->data()[i];
    GRADCOMP_CHECK_ARG(k >= 0, what, ": part ", i, " asks for ", k, " entries");
    ks[i] = static_cast<uint64_t>(k);
  }
  return ks;
}

}  // namespace

void bindParts(nb::module_& m) {
  m.def(
      "encode_parts_into",
      [](const Compressor& codec, const Compressor& exact, FloatsIn x, Parts parts, BytesOut out, size_t at,
         std::optional<FloatsIn> residualIn, std::optional<FloatsOut> residualOut, uint64_t seed, uint32_t rank,
         uint32_t step, bool skipNonFinite, bool scaleAuto, std::optional<Entries> entries,
         std::optional<uintptr_t> stream, int threads) {
        DeviceOfCall device("encode_parts", stream, threads);
        device.add("x", x).add("out", out);
        GRADCOMP_CHECK_ARG(residualIn.has_value() == residualOut.has_value(),
                           "encode_parts: residual_in and residual_out go together");
        if (residualIn) {
          device.add("residual_in", *residualIn).add("residual_out", *residualOut);
          GRADCOMP_CHECK_ARG(residualIn->size() == x.size() && residualOut->size() == x.size(),
                             "encode_parts: residuals of ", residualIn->size(), " and ", residualOut->size(),
                             " elements for a buffer of ", x.size());
        }
        const ExecContext exec = device.exec();
        const auto rows = rowsOf(parts, x.size(), "encode_parts");
        const auto ks = entriesOf(entries, rows.size(), "encode_parts");
        const auto xs = view(x);
        const auto wire = view(out);
        GRADCOMP_CHECK_ARG(at % 16 == 0, "encode_parts: the first wire must start 16-byte aligned, got offset ", at);
        uint64_t saturated = 0, skipped = 0;
        nb::gil_scoped_release release;
        std::vector<float> zeros, scratch;
        for (size_t i = 0; i < rows.size(); ++i) {
          const PartRow& r = rows[i];
          const Compressor& c = r.lossless ? exact : codec;
          const size_t n = r.end - r.start;
          EncodeContext ctx = encodeContext(seed, rank, step, r.tensorId);
          ctx.kOverride = r.lossless ? 0 : ks[i];
          const size_t room = c.maxEncodedBytes(n, ctx);
          GRADCOMP_CHECK_ARG(at + room <= wire.size(), "encode_parts: the message holds ", wire.size(),
                             " bytes; elements [", r.start, ", ", r.end, ") need ", room, " more at byte ", at);
          const auto in = xs.subspan(r.start, n);
          const auto dst = wire.subspan(at, room);
          const bool ef = residualIn.has_value() && !r.lossless;
          const double gamma = ef && scaleAuto ? scaledFeedbackGamma(c.varianceBound(n, ctx.kOverride)) : 1.0;
          GRADCOMP_CHECK_ARG(gamma == 1.0 || exec.device == Device::Cpu, "encode_parts: ef:scale=auto with codec '",
                             c.canonicalSpec(), "' (variance bound >= 1) runs on cpu buffers");
          EncodeResult res;
          try {
            if (gamma < 1.0)
              res = encodeScaledWithResidual(c, static_cast<float>(gamma), in, view(*residualIn).subspan(r.start, n),
                                             view(*residualOut).subspan(r.start, n), dst, ctx, scratch, exec);
            else
              res = ef ? c.encodeWithResidual(in, view(*residualIn).subspan(r.start, n),
                                              view(*residualOut).subspan(r.start, n), dst, ctx, exec)
                       : c.encode(in, dst, ctx, exec);
          } catch (const NonFiniteError& e) {
            // With a residual, the non-finite value may be value + residual of a finite value (a state grown
            // past the float range): reported, not skipped, so that the caller resets that state (skip is for
            // non-finite gradients; skipping would keep the state, and drop this part, at every later step).
            const bool stateOverflow = ef && exec.device == Device::Cpu &&
                                       std::all_of(in.begin(), in.end(), [](float v) { return std::isfinite(v); });
            if (!skipNonFinite || stateOverflow)
              return std::tuple<int, uint64_t, size_t, uint64_t, uint64_t>(1, r.start + e.index(), 0, saturated, skipped);
            GRADCOMP_CHECK_ARG(exec.device == Device::Cpu, "encode_parts: nonfinite=skip runs on cpu buffers");
            zeros.assign(n, 0.0f);
            res = c.encode(zeros, dst, ctx, exec);
            if (ef) {
              const auto ri = view(*residualIn).subspan(r.start, n);
              std::memmove(view(*residualOut).data() + r.start, ri.data(), n * sizeof(float));
            }
            ++skipped;
          }
          saturated += res.saturated;
          at += align16(res.wireBytes);
        }
        return std::tuple<int, uint64_t, size_t, uint64_t, uint64_t>(0, 0, at, saturated, skipped);
      },
      "codec"_a, "exact"_a, "x"_a.noconvert(), "parts"_a.noconvert(), "out"_a.noconvert(), "at"_a,
      "residual_in"_a.noconvert() = nb::none(), "residual_out"_a.noconvert() = nb::none(), nb::kw_only(),
      "seed"_a = 0, "rank"_a = 0, "step"_a = 0, "skip_nonfinite"_a = false, "scale_auto"_a = false,
      "entries"_a.noconvert() = nb::none(), "stream"_a = nb::none(), "threads"_a = 1,
      "Encodes every part of x into out from byte `at` on. Returns (status, bad index, end offset, "
      "saturated, skipped): status 1 when a part is non-finite (bad index: its first bad element in x), "
      "with nothing after it encoded. scale_auto: error feedback as ef:scale=auto. entries: one int64 per "
      "part, the entries a sparse codec sends for it (DGC's warm-up; 0: the codec's own k).");

  m.def(
      "decode_parts_into",
      [](const Compressor& codec, const Compressor& exact, BytesIn slot, std::optional<BytesIn> lengths,
         size_t used, FloatsOut x, Parts parts, bool accumulate, int origin, std::optional<Entries> entries,
         std::optional<uintptr_t> stream, int threads) {
        const ExecContext exec = DeviceOfCall("decode_parts", stream, threads).add("slot", slot).add("x", x).exec();
        // The wires' sizes come from their headers; a device message is read through a host copy.
        const BytesIn& host = lengths ? *lengths : slot;
        requireHost("decode_parts", "lengths", host);
        GRADCOMP_CHECK_ARG(host.size() >= std::min(used, slot.size()) && used <= slot.size(), "decode_parts: ",
                           used, " bytes used of a message of ", slot.size(), " (host copy ", host.size(), ")");
        const auto rows = rowsOf(parts, x.size(), "decode_parts");
        const auto ks = entriesOf(entries, rows.size(), "decode_parts");
        const auto wire = view(slot);
        const auto* head = reinterpret_cast<const std::byte*>(host.data());
        const auto xs = view(x);
        nb::gil_scoped_release release;
        size_t at = 32;
        for (size_t i = 0; i < rows.size(); ++i) {
          const PartRow& r = rows[i];
          const Compressor& c = r.lossless ? exact : codec;
          EncodeContext bound;  // the sender's entries bound its wire (a larger k during DGC's warm-up)
          bound.kOverride = r.lossless ? 0 : ks[i];
          GRADCOMP_CHECK(at + kWireHeaderBytes <= used, DecodeError, "rank ", origin, "'s message ends at byte ", used,
                         ", before its wire for elements [", r.start, ", ", r.end, ")");
          uint64_t payload;
          std::memcpy(&payload, head + at + 32, sizeof payload);  // WireHeader::payloadBytes
          const size_t most = std::min(used - at, c.maxEncodedBytes(r.end - r.start, bound));
          GRADCOMP_CHECK(payload <= most - kWireHeaderBytes, DecodeError, "rank ", origin, "'s wire for elements [",
                         r.start, ", ", r.end, ") claims ", payload, " payload bytes; ", most - kWireHeaderBytes,
                         " at most fit");
          const size_t nbytes = kWireHeaderBytes + payload;
          c.decode(wire.subspan(at, nbytes), xs.subspan(r.start, r.end - r.start),
                   accumulate ? DecodeMode::Accumulate : DecodeMode::Overwrite, exec);
          at += align16(nbytes);
        }
      },
      "codec"_a, "exact"_a, "slot"_a.noconvert(), "lengths"_a.noconvert() = nb::none(), "used"_a, "x"_a.noconvert(),
      "parts"_a.noconvert(), nb::kw_only(), "accumulate"_a = false, "origin"_a = 0,
      "entries"_a.noconvert() = nb::none(), "stream"_a = nb::none(), "threads"_a = 1,
      "Decodes the wires of a message (after its 32-byte header) into the parts of x; DecodeError names "
      "the sender (`origin`) and the part when a wire does not fit.");
}

}  // namespace gradcomp::python
