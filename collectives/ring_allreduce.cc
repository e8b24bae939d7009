// `ring`: reduce-scatter then all-gather (collectives/ring_primitives.h). Uncompressed it moves raw fp32
// in pipelined chunks; with a codec it is the compressed ring of CGX: every reduce-scatter hop encodes
// the partial sum, the receiver decodes and accumulates in fp32 (never re-quantizing a sum it adds to),
// and each reduced segment is encoded once and forwarded unchanged in the all-gather.
//
// A codec with rotate=hadamard is summed in the rotated domain: every rank rotates its whole tensor once
// (y = H D x / sqrt(b), D keyed by seed, step and tensor, the same on every rank), the ring runs the
// codec less its rotation on y, and the sum is rotated back once at the end. The rotation is linear and
// shared, so the rotated sum is the sum's rotation; each hop then skips the two transforms the rotated
// codec would make per encoded chunk and per decode (collectives/README.md has the error feedback).
#include <bit>
#include <chrono>
#include <cmath>

#include "collectives/algorithm_registry.h"
#include "collectives/ring_primitives.h"
#include "core/timing.h"
#include "kernels/cpu/hadamard_rotation.h"

namespace gradcomp {
namespace {

class RingAllreduce final : public AllreduceAlgorithm {
 public:
  explicit RingAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c) {
    if (!payload_.raw()) {
      requireReencodable();
      requireSourceFeedback();
    }
  }

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const RingContext rc{comm, op.sequence, 1, op.tensorId, op.step, config_.seed, &scratch_};
    if (payload_.raw()) {
      ringReduceScatterRaw(rc, data, config_.chunkBytes);
      ringAllgatherRaw(rc, data, config_.chunkBytes);
    } else if (payload_.rotationBlock()) {
      sumInRotatedDomain(rc, data);
    } else {
      ringReduceScatterCoded(rc, data, payload_, config_.chunkBytes);
      ringAllgatherCoded(rc, data, payload_, config_.chunkBytes);
    }
  }

  // The compressed ring on the rotated tensor. Error feedback (none or ef: the ring takes only sliceable
  // policies) keeps its residual in the original domain between calls, as the rotated codec's does: the
  // residual is added to the gradient before the rotation (the hops' encodes then add zeros: the same
  // sum a hop would form, in another order), the hops' encodes leave theirs in the rotated domain, and
  // that residual is rotated back once after the ring, as the sum is. The rotation's prescale 1 / b
  // keeps every partial sum of the butterflies within the input's magnitude (no rank's choice to agree
  // on, unlike the codec's own power of two); 2^-13 at most, exact above fp32's subnormals.
  void sumInRotatedDomain(const RingContext& rc, std::span<float> data) {
    const uint64_t n = data.size(), b = payload_.rotationBlock();
    const int log2b = std::countr_zero(b);
    const float down = std::ldexp(1.0f, -log2b), up = std::ldexp(1.0f, log2b);
    const scalar::RotationKey key{config_.seed, rc.step, rc.tensorId};
    CodecCost& cost = payload_.cost();
    ErrorFeedback& ef = payload_.errorFeedback();
    auto t0 = std::chrono::steady_clock::now();
    const std::span<float> carried = ef.sliceResidual(rc.tensorId);
    if (carried.size() == n)  // another length: compressSlice's shape rule decides, as without rotation
      for (uint64_t i = 0; i < n; ++i) {  // one pass: moved into the gradient, cleared
        data[i] += carried[i];
        carried[i] = 0.0f;
      }
    cpu::rotateForward(data.data(), data.data(), n, b, key, down);
    cost.encodeSeconds += secondsSince(t0);
    const auto rotateResidualBack = [&] {
      const std::span<float> residual = ef.sliceResidual(rc.tensorId);
      if (residual.size() == n) cpu::rotateInverse(residual.data(), residual.data(), n, b, key, up);
      ef.enforceResidualLimit(rc.tensorId, rc.step);  // `limit` holds in the original domain
    };
    try {
      const PayloadCodec::RotatedDomain rotated(payload_);
      ringReduceScatterCoded(rc, data, payload_, config_.chunkBytes);
      ringAllgatherCoded(rc, data, payload_, config_.chunkBytes);
    } catch (...) {
      rotateResidualBack();  // the hops' residuals so far, back where the next call expects them
      throw;
    }
    t0 = std::chrono::steady_clock::now();
    rotateResidualBack();
    cpu::rotateInverse(data.data(), data.data(), n, b, key, up);
    cost.decodeSeconds += secondsSince(t0);
  }

  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    const size_t segment = (n + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
    // A rotated codec's hops carry the codec without its rotation (sumInRotatedDomain).
    const size_t bytes = payload_.raw() ? segment * sizeof(float)
                                        : payload_.maxHopBytes(segment, payload_.steadyStep());
    return 2.0 * (ranks - 1) * l.seconds(bytes);
  }
  // Every rank encodes each segment once (P-1 hops + its all-gather segment) and decodes P-1 hop
  // payloads and P-1 all-gather payloads plus its own. A rotated codec's hops run without the rotation,
  // and each rank rotates the tensor forward and the sum back, and the residual back with ef
  // (sumInRotatedDomain).
  CodecWork codecWork(size_t n, int ranks, int) const override {
    if (payload_.raw() || ranks <= 1) return {};
    const double seg = static_cast<double>(n) / ranks;
    CodecWork w{static_cast<double>(n), seg * (2.0 * (ranks - 1) + 1)};
    if (payload_.rotationBlock()) {
      const bool residual = payload_.errorFeedback().name() != "none";
      w.withoutRotation = true;
      w.rotateElements = static_cast<double>(n) * (residual ? 3 : 2);
    }
    return w;
  }
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeRingAllreduce(const AllreduceConfig& c) {
  return std::make_unique<RingAllreduce>(c);
}

}  // namespace gradcomp
