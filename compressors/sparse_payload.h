// The (index, value) payload shared by `topk` and `threshold`:
//   [indices: u32 (or u64 when n > 2^32 - 1), strictly ascending][values: fp32 or fp16]
// flags bit 0: values are fp16; bit 1: indices are 64-bit. header.count = number of entries.
// Decoding checks every index (< n, strictly ascending: no duplicates) and every value (finite)
// before the first write.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/wire_format.h"

namespace gradcomp {

inline constexpr uint32_t kSparseFp16Values = 1;
inline constexpr uint32_t kSparseWideIndices = 2;

struct SparseLayout {
  uint64_t indexOffset, valueOffset, total;
  bool fp16Values, wideIndices;
};

// Throws DecodeError (sizes from a header) on overflow or unknown flags.
SparseLayout sparseLayout(uint64_t count, uint32_t flags);
uint32_t sparseFlags(uint64_t numElements, bool fp16Values);

// Writes a selection (indices ascending, values fp32) as the payload of `header` (whose count and
// flags are set); converts values to fp16 when the flags say so. Returns total wire bytes.
size_t writeSparseWire(WireHeader header, const uint64_t* indices32or64, const float* values, std::span<std::byte> wire);

// Checks a sparse header's fields and payload size.
void checkSparseHeader(const WireHeader& h, const char* codec);
// Checks every index (< n, strictly ascending) and value (finite) of a checked sparse header's payload;
// throws DecodeError naming the first bad entry.
void validateSparsePayload(const WireHeader& h, const std::byte* payload, const char* codec);
// Validates the payload of a checked sparse header and scatters it into out (overwrite zeroes first, on
// exec's threads).
void decodeSparseWire(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                      const char* codec, const ExecContext& exec);

// The value actually carried for v (fp32 or fp16-rounded): what the receiver will decode.
float sparseWireValue(float v, bool fp16Values);

// A chosen set of coordinates, ascending or (random-k) in permutation order, with their fp32 values.
struct SparseSelection {
  std::vector<uint64_t> indices;
  std::vector<float> values;
  uint64_t nonFiniteIndex = EncodeResult::kNoIndex;  // input held NaN/Inf: nothing selected
};

// Exact top-k (radix select, ties to the lower index, indices ascending).
SparseSelection selectTopK(std::span<const float> x, uint64_t k);

// Writes a selection as a topk/threshold wire; fills wireBytes and entries.
EncodeResult writeSelection(CodecId codec, uint64_t numElements, bool fp16Values, const SparseSelection& sel,
                            std::span<std::byte> wire);

// Error feedback after a sparse encode: residual holds c = g + e; subtract what was sent.
void subtractSent(const SparseSelection& sel, bool fp16Values, std::span<float> residual);

// k for n elements from an explicit k, a ratio, or a per-call override, clamped to n
// (ratio rounding to 0 gives 1 for n > 0): the documented rule of every sparse codec.
struct SparseBudget {
  uint64_t k = 0;       // explicit k (0 = use ratio)
  double ratio = 0.01;
  static SparseBudget fromSpec(const CodecSpec& spec);
  uint64_t kFor(uint64_t n, uint64_t kOverride) const;
};

}  // namespace gradcomp
