#include "compressors/sparse_payload.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compressors/tile_ranges.h"
#include "core/error.h"
#include "kernels/cpu/topk_select.h"
#include "kernels/scalar/float_formats.h"

namespace gradcomp {

SparseLayout sparseLayout(uint64_t count, uint32_t flags) {
  GRADCOMP_CHECK((flags & ~(kSparseFp16Values | kSparseWideIndices)) == 0, DecodeError,
                 "sparse payload: unknown format flags 0x", std::hex, flags);
  SparseLayout l{};
  l.fp16Values = flags & kSparseFp16Values;
  l.wideIndices = flags & kSparseWideIndices;
  SectionLayout layout;
  l.indexOffset = layout.add(wireBytesFor(count, l.wideIndices ? 8 : 4, "sparse indices"));
  l.valueOffset = layout.add(wireBytesFor(count, l.fp16Values ? 2 : 4, "sparse values"));
  l.total = layout.totalBytes();
  return l;
}

uint32_t sparseFlags(uint64_t numElements, bool fp16Values) {
  return (fp16Values ? kSparseFp16Values : 0) | (numElements > UINT32_MAX ? kSparseWideIndices : 0);
}

float sparseWireValue(float v, bool fp16Values) {
  return fp16Values ? scalar::halfBitsToFloat(scalar::floatToHalfBits(v)) : v;
}

size_t writeSparseWire(WireHeader h, const uint64_t* indices, const float* values, std::span<std::byte> wire) {
  const SparseLayout l = sparseLayout(h.count, h.flags);
  h.payloadBytes = l.total;
  writeHeader(h, wire);
  std::byte* payload = wire.data() + kWireHeaderBytes;
  const uint64_t n = h.count;
  const uint64_t indexBytes = n * (l.wideIndices ? 8 : 4), valueBytes = n * (l.fp16Values ? 2 : 4);
  // Padding bytes are part of the deterministic output: zero exactly those.
  std::memset(payload + l.indexOffset + indexBytes, 0, l.valueOffset - l.indexOffset - indexBytes);
  std::memset(payload + l.valueOffset + valueBytes, 0, l.total - l.valueOffset - valueBytes);
  if (n == 0) return kWireHeaderBytes + l.total;  // an empty selection has null arrays: nothing to copy
  if (l.wideIndices) {
    std::memcpy(payload + l.indexOffset, indices, indexBytes);
  } else {
    auto* idx32 = reinterpret_cast<uint32_t*>(payload + l.indexOffset);
    for (uint64_t i = 0; i < n; ++i) idx32[i] = static_cast<uint32_t>(indices[i]);
  }
  if (l.fp16Values) {
    auto* v16 = reinterpret_cast<uint16_t*>(payload + l.valueOffset);
    for (uint64_t i = 0; i < n; ++i) v16[i] = scalar::floatToHalfBits(values[i]);
  } else {
    std::memcpy(payload + l.valueOffset, values, valueBytes);
  }
  return kWireHeaderBytes + l.total;
}

namespace {

template <typename Index>
void checkIndices(const Index* idx, uint64_t count, uint64_t n, const char* codec) {
  for (uint64_t i = 0; i < count; ++i) {
    GRADCOMP_CHECK(idx[i] < n, DecodeError, codec, ": entry ", i, " has index ", idx[i], ", outside [0, ", n, ")");
    GRADCOMP_CHECK(i == 0 || idx[i] > idx[i - 1], DecodeError, codec, ": entry ", i, " has index ", idx[i],
                   " after ", idx[i - 1], " (indices must be strictly ascending: duplicate or unsorted)");
  }
}

template <typename Index, typename ValueAt>
void scatter(const Index* idx, uint64_t count, ValueAt value, float* out, bool accumulate) {
  if (accumulate) {
    for (uint64_t i = 0; i < count; ++i) out[idx[i]] += value(i);
  } else {
    for (uint64_t i = 0; i < count; ++i) out[idx[i]] = value(i);
  }
}

}  // namespace

void checkSparseHeader(const WireHeader& h, const char* codec) {
  GRADCOMP_CHECK(h.blockSize == 0 && h.param == 0, DecodeError, codec, ": header block size / param must be 0");
  GRADCOMP_CHECK(h.count <= h.numElements, DecodeError, codec, ": header announces ", h.count,
                 " entries for ", h.numElements, " elements");
  const SparseLayout l = sparseLayout(h.count, h.flags);
  GRADCOMP_CHECK(l.wideIndices == (h.numElements > UINT32_MAX), DecodeError, codec,
                 ": index width flag does not match the element count ", h.numElements);
  GRADCOMP_CHECK(h.payloadBytes == l.total, DecodeError, codec, ": header announces ", h.payloadBytes,
                 " payload bytes, ", h.count, " entries need ", l.total);
}

void validateSparsePayload(const WireHeader& h, const std::byte* payload, const char* codec) {
  const SparseLayout l = sparseLayout(h.count, h.flags);
  const auto* v32 = reinterpret_cast<const float*>(payload + l.valueOffset);
  const auto* v16 = reinterpret_cast<const uint16_t*>(payload + l.valueOffset);
  for (uint64_t i = 0; i < h.count; ++i) {
    const bool finite = l.fp16Values ? scalar::halfIsFinite(v16[i]) : std::isfinite(v32[i]);
    GRADCOMP_CHECK(finite, DecodeError, codec, ": entry ", i, " carries a non-finite value");
  }
  if (l.wideIndices)
    checkIndices(reinterpret_cast<const uint64_t*>(payload + l.indexOffset), h.count, h.numElements, codec);
  else
    checkIndices(reinterpret_cast<const uint32_t*>(payload + l.indexOffset), h.count, h.numElements, codec);
}

void decodeSparseWire(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                      const char* codec, const ExecContext& exec) {
  validateSparsePayload(h, payload, codec);
  const SparseLayout l = sparseLayout(h.count, h.flags);
  const auto* v32 = reinterpret_cast<const float*>(payload + l.valueOffset);
  const auto* v16 = reinterpret_cast<const uint16_t*>(payload + l.valueOffset);
  const bool accumulate = mode == DecodeMode::Accumulate;
  if (!accumulate) {
    // The zero fill, nearly all of a 1 % payload's overwrite, split over the threads as a dense decode's
    // tiles are (on one thread, 2 threads decoded no faster than 1, behind torch's zeros + index_put);
    // the scatter after it stays on one.
    constexpr uint64_t kChunk = uint64_t{1} << 16;
    const uint64_t n = out.size();
    forTileRanges(ceilDiv(n, kChunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t) {
      std::fill(out.begin() + static_cast<ptrdiff_t>(std::min(n, c0 * kChunk)),
                out.begin() + static_cast<ptrdiff_t>(std::min(n, c1 * kChunk)), 0.0f);
    });
  }
  auto run = [&](auto* idx) {
    if (l.fp16Values)
      scatter(idx, h.count, [&](uint64_t i) { return scalar::halfBitsToFloat(v16[i]); }, out.data(), accumulate);
    else
      scatter(idx, h.count, [&](uint64_t i) { return v32[i]; }, out.data(), accumulate);
  };
  if (l.wideIndices)
    run(reinterpret_cast<const uint64_t*>(payload + l.indexOffset));
  else
    run(reinterpret_cast<const uint32_t*>(payload + l.indexOffset));
}

SparseSelection selectTopK(std::span<const float> x, uint64_t k) {
  SparseSelection sel;
  if (k == 0) return sel;
  sel.indices.resize(k);
  sel.values.resize(k);
  switch (cpu::sampledTopK(x.data(), x.size(), k, sel.indices.data(), sel.values.data())) {
    case cpu::SampledTopK::Done:
      return sel;
    case cpu::SampledTopK::NonFinite:
      sel.indices.clear();
      sel.values.clear();
      sel.nonFiniteIndex = firstNonFinite(x);
      return sel;
    case cpu::SampledTopK::Fallback:
      break;
  }
  const cpu::SelectionThreshold t = cpu::radixSelect(x.data(), x.size(), k);
  if (t.nonFinite) {
    sel.indices.clear();
    sel.values.clear();
    sel.nonFiniteIndex = firstNonFinite(x);
    return sel;
  }
  const size_t got = cpu::gatherSelected<uint64_t>(x.data(), x.size(), t, k, sel.indices.data(), sel.values.data());
  GRADCOMP_CHECK(got == k, Error, "top-k selected ", got, " entries instead of ", k);
  return sel;
}

EncodeResult writeSelection(CodecId codec, uint64_t numElements, bool fp16Values, const SparseSelection& sel,
                            std::span<std::byte> wire) {
  WireHeader h;
  h.codec = static_cast<uint16_t>(codec);
  h.flags = sparseFlags(numElements, fp16Values);
  h.numElements = numElements;
  h.count = sel.indices.size();
  EncodeResult r;
  r.wireBytes = writeSparseWire(h, sel.indices.data(), sel.values.data(), wire);
  r.entries = h.count;
  return r;
}

void subtractSent(const SparseSelection& sel, bool fp16Values, std::span<float> residual) {
  for (size_t i = 0; i < sel.indices.size(); ++i)
    residual[sel.indices[i]] -= sparseWireValue(sel.values[i], fp16Values);
}

SparseBudget SparseBudget::fromSpec(const CodecSpec& spec) {
  GRADCOMP_CHECK_ARG(!(spec.has("k") && spec.has("ratio")), "codec '", spec.name(), "': give k or ratio, not both");
  SparseBudget b;
  // Only the one given is read (ratio by default), so the canonical spec names one budget and parses back.
  if (spec.has("k"))
    b.k = spec.getUInt("k", 0, 1, UINT64_MAX);  // k=0 is rejected: a codec that sends nothing is a mistake
  else
    b.ratio = spec.getDouble("ratio", 0.01, 0.0, 1.0);
  return b;
}

uint64_t SparseBudget::kFor(uint64_t n, uint64_t kOverride) const {
  if (n == 0) return 0;
  if (kOverride) return std::min(kOverride, n);
  if (k) return std::min(k, n);
  const double r = std::llround(ratio * static_cast<double>(n));
  return std::clamp<uint64_t>(static_cast<uint64_t>(r), 1, n);
}

}  // namespace gradcomp
