// The one error model of gradcomp: typed exceptions that carry file:line and a message naming the
// operation, the tensor and the sizes involved. Library code never returns int status codes.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace gradcomp {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& what)
      : std::runtime_error(what + " [" + file + ":" + std::to_string(line) + "]") {}
};

// A configuration value or call argument is invalid (rejected at construction / the public boundary).
class InvalidArgument : public Error { using Error::Error; };
// A wire buffer failed validation; nothing was written to the output.
class DecodeError : public Error { using Error::Error; };
// Requested backend (CUDA, MPI, NCCL) is not compiled in or not usable.
class BackendUnavailable : public Error { using Error::Error; };

// A collective wait passed its deadline. Names the peer and the operation (with its sequence number).
class TimeoutError : public Error { using Error::Error; };
// A peer failed (its thread threw, its process died, the transport reported an error for it).
class PeerFailure : public Error { using Error::Error; };
// Ranks disagree about a collective (sequence number, element count, codec or configuration).
// Thrown on every rank, naming both values.
class CollectiveMismatch : public Error { using Error::Error; };
// The transport itself failed (MPI / NCCL error code, a message larger than its receive buffer).
class TransportError : public Error { using Error::Error; };
// A communicator was used by a second thread while an operation of another thread was running on it.
class ConcurrentUse : public Error { using Error::Error; };
// Training produced a non-finite loss (the learning rate, or a codec without error feedback, blew up).
class TrainingDiverged : public Error { using Error::Error; };

// A gradient holds NaN or Inf. Carries the tensor id and the first offending element index.
class NonFiniteError : public Error {
 public:
  NonFiniteError(const char* file, int line, const std::string& what, uint32_t tensorId, uint64_t index)
      : Error(file, line, what), tensorId_(tensorId), index_(index) {}
  uint32_t tensorId() const { return tensorId_; }
  uint64_t index() const { return index_; }

 private:
  uint32_t tensorId_;
  uint64_t index_;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream s;
  (s << ... << std::forward<Args>(args));
  return s.str();
}
}  // namespace detail

}  // namespace gradcomp

#define GRADCOMP_THROW(Type, ...) throw Type(__FILE__, __LINE__, ::gradcomp::detail::concat(__VA_ARGS__))

#define GRADCOMP_CHECK(cond, Type, ...) \
  do {                                  \
    if (!(cond)) GRADCOMP_THROW(Type, __VA_ARGS__); \
  } while (0)

#define GRADCOMP_CHECK_ARG(cond, ...) GRADCOMP_CHECK(cond, ::gradcomp::InvalidArgument, __VA_ARGS__)

#define GRADCOMP_CHECK_EQ(a, b, ...)                                                             \
  do {                                                                                           \
    const auto& gcA_ = (a);                                                                      \
    const auto& gcB_ = (b);                                                                      \
    if (!(gcA_ == gcB_))                                                                         \
      GRADCOMP_THROW(::gradcomp::InvalidArgument, #a " (", gcA_, ") != " #b " (", gcB_, "): ", \
                     __VA_ARGS__);                                                               \
  } while (0)
