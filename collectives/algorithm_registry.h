// Factories of the all-reduce algorithms, one per file; AllreduceAlgorithm::make picks by name.
#pragma once

#include <memory>

#include "collectives/allreduce.h"

namespace gradcomp {

std::unique_ptr<AllreduceAlgorithm> makeVendorAllreduce(const AllreduceConfig& c);
std::unique_ptr<AllreduceAlgorithm> makeRingAllreduce(const AllreduceConfig& c);
std::unique_ptr<AllreduceAlgorithm> makeAllgatherAllreduce(const AllreduceConfig& c);
std::unique_ptr<AllreduceAlgorithm> makeRandomKAllreduce(const AllreduceConfig& c);
std::unique_ptr<AllreduceAlgorithm> makeHierarchicalAllreduce(const AllreduceConfig& c);
std::unique_ptr<AllreduceAlgorithm> makeTreeAllreduce(const AllreduceConfig& c);
std::unique_ptr<AllreduceAlgorithm> makePowerSgdAllreduce(const AllreduceConfig& c);

// Bytes of one encoded payload of n elements (the upper bound the receiver reserves; exact for
// fixed-size codecs) at the steady step (PayloadCodec::steadyStep: past DGC's warm-up), used by the
// predictions.
size_t encodedBytes(const PayloadCodec& codec, size_t n);

}  // namespace gradcomp
