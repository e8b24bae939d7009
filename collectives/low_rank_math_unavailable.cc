// A build without CUDA: the device math is refused with an error saying so.
#include "collectives/low_rank_math.h"
#include "core/error.h"

namespace gradcomp {

std::unique_ptr<LowRankMath> makeDeviceLowRankMath(const ExecContext&) {
  GRADCOMP_THROW(BackendUnavailable,
                 "PowerSGD on a CUDA buffer: this build has no CUDA (configure with GRADCOMP_WITH_CUDA=ON)");
}

}  // namespace gradcomp
