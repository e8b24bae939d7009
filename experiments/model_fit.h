// Fits the cost model to an emulated-cluster sweep (scripts/cluster-sweep's CSV) and reports its error
// on held-out points. Per configuration (rate, hosts, ranks per host): the inter-node link's alpha and
// beta come from a least-squares fit of the uncompressed ring's time against size on the training sizes
// (every other size, smallest first); each case's codec cost (seconds per element of codec work) from
// its own training rows, two ways: as the run measured it (encode + decode time, added to the wire
// time), and fitted to the training times (time - wire = c * work, which absorbs the compressed ring's
// overlap of codec and wire and the sharing of cores). Every held-out row is then predicted with the
// algorithms' own formulas (predictSeconds + codecWork) and compared with its measured time.
#pragma once

#include <ostream>
#include <string>

namespace gradcomp {

struct FitReport {
  double medianRelativeError = 0;
  size_t heldOutPoints = 0;
  double medianRelativeErrorFittedCodec = 0;
};

FitReport fitCostModel(const std::string& sweepCsv, std::ostream& out);

}  // namespace gradcomp
