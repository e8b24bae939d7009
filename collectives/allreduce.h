// All-reduce algorithms. Setup (codec, error feedback, support check) happens in the constructor; run()
// is the hot path. Every run: agreement check (sequence, count, configuration, non-finite inputs) before
// data moves, the algorithm's sum, the average if asked, and optionally the relative error against the
// exact fp32 all-reduce (check mode). Every rank ends with the same bits.
//
//   vendor        MPI_Iallreduce / ncclAllReduce on fp32 (the baseline)
//   ring          reduce-scatter + all-gather; with a codec: the compressed ring (encode, send, decode,
//                 accumulate in fp32 per hop; each reduced segment encoded once and forwarded unchanged)
//   allgather     every rank's payload gathered, decoded and summed in rank order (sparse, sign, any codec)
//   randomk       shared-seed coordinates; only the values are all-reduced (ring)
//   hierarchical  intra-node reduce-scatter, inter-node all-reduce of each shard (any of the above),
//                 intra-node all-gather
//   tree          recursive doubling (latency-bound, small messages)
//   powersgd      PowerSGD (Vogels et al. 2019): a rank-r approximation P Q^T of each matrix, two summed
//                 all-reduces (P, then Q) over the ring, fp32 or through fp16 / bf16; its own error
//                 feedback and warm-started Q (collectives/powersgd_allreduce.cc)
// Steps and wire bytes per rank: collectives/README.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/link_model.h"
#include "collectives/payload_codec.h"
#include "collectives/ring_primitives.h"
#include "core/exec_context.h"

namespace gradcomp {

enum class ReduceOp { Sum, Average };
const char* reduceOpName(ReduceOp op);
ReduceOp parseReduceOp(const std::string& name);

// One tensor of a bucket seen as a matrix: `count` elements from `offset`, `rows` x (count / rows)
// (rows 0: a vector). powersgd compresses each matrix on its own, as torch's hook splits its bucket.
struct MatrixSegment {
  uint64_t offset = 0, count = 0, rows = 0;
};

struct AllreduceConfig {
  std::string algorithm = "ring";
  std::string codec = "none";           // codec spec (compressors/registry.h)
  std::string errorFeedback = "none";   // error-feedback spec (compressors/error_feedback.h)
  std::string interAlgorithm = "ring";  // hierarchical: the algorithm between nodes
  ReduceOp op = ReduceOp::Sum;
  uint64_t seed = 0;                    // Philox / random-k key, the same on every rank
  size_t chunkBytes = size_t{1} << 20;  // uncompressed ring: pipeline chunk
  bool blockingVendor = false;          // vendor: blocking MPI_Allreduce, no deadline (benchmark baseline)
  // powersgd: "rank=1,start_iter=0,min_compression=2,epsilon=1e-8,batch=false" (collectives/powersgd_allreduce.cc);
  // its error feedback is errorFeedback ("ef" or "none"), its P / Q carrier the codec (none, fp16, bf16).
  std::string lowRank;
  // For predictions only (the cost model, `gradcomp model --shape`): the gradient as these matrices, so
  // powersgd models (rows + cols) x r per matrix instead of assuming one square matrix.
  std::vector<MatrixSegment> modelMatrices;
};

struct AllreduceCall {
  uint32_t tensorId = 0;  // keys error-feedback state and the Philox stream
  uint32_t step = 0;
  bool check = false;     // also run the exact fp32 all-reduce and report the relative error
  uint64_t rows = 0;      // the tensor as a rows x (n / rows) matrix (powersgd); 0: a vector
  std::span<const MatrixSegment> segments = {};  // a bucket of several tensors (powersgd); empty: one, of `rows`
};

struct AllreduceReport {
  uint64_t sequence = 0;
  uint64_t bytesSent = 0, bytesSentIntra = 0, bytesSentInter = 0;  // this rank's data bytes, this operation
  uint64_t controlBytesSent = 0;  // the agreement check's descriptors (kAgreementDescriptorBytes x ceil(log2 P) rounds)
  CodecCost cost;
  double relativeError = -1;  // check mode: ||result - exact|| / ||exact|| (0 when exact is zero)
  uint64_t skippedNonFinite = 0;
};

// The per-call values an algorithm's sum() sees.
struct OpContext {
  uint64_t sequence;
  uint32_t tensorId, step;
  uint64_t rows = 0;
  std::span<const MatrixSegment> segments = {};
  // Where `data` lives: the host, unless the algorithm sums device buffers (sumsDeviceBuffers).
  ExecContext exec = {};
};

class AllreduceAlgorithm {
 public:
  // Throws InvalidArgument for an unknown algorithm or an unsupported (algorithm, codec, feedback) pair,
  // naming both.
  static std::unique_ptr<AllreduceAlgorithm> make(const AllreduceConfig& config);
  static std::vector<std::string> names();
  virtual ~AllreduceAlgorithm() = default;

  const AllreduceConfig& config() const { return config_; }
  virtual std::string describe() const;

  AllreduceReport run(std::span<float> data, Communicator& comm, const AllreduceCall& call = {},
                      const ExecContext& exec = {});

  // Alpha-beta prediction of the wire time for n fp32 elements on `ranks` ranks, `ranksPerNode` per node
  // (intra links inside a node, inter links between): the formulas of collectives/README.md.
  virtual double predictSeconds(size_t numElements, int ranks, int ranksPerNode, const LinkModel& links) const = 0;

  // Elements each rank encodes and decodes in one all-reduce of n elements (the codec's share of the
  // cost model: multiply by the codec's seconds per element). Zero for the uncompressed paths.
  struct CodecWork {
    double encodeElements = 0, decodeElements = 0;
    // The compressed ring's rotated domain (a rotate=hadamard codec, collectives/README.md): the elements
    // above go through the codec less its rotation, and each rank rotates rotateElements itself (the
    // tensor forward, the sum and the residual back).
    bool withoutRotation = false;
    double rotateElements = 0;
  };
  virtual CodecWork codecWork(size_t numElements, int ranks, int ranksPerNode) const = 0;

  // The codec and error feedback that carry the data (hierarchical: its inter-node algorithm's).
  virtual PayloadCodec& codecInUse() { return payload_; }
  ErrorFeedback& errorFeedback() { return codecInUse().errorFeedback(); }
  PayloadCodec& payload() { return payload_; }

  // The sum, in place, after the agreement check. Public so hierarchical can nest algorithms.
  virtual void sum(std::span<float> data, Communicator& comm, const OpContext& op) = 0;

  // Checkpoint state: the error-feedback policy's, plus whatever the algorithm keeps (powersgd: Q and
  // residuals). Loaded bitwise; a file of another algorithm or format is an InvalidArgument.
  virtual void saveState(std::ostream& out);
  virtual void loadState(std::istream& in);
  // Whether the all-reduce is lossy for finite inputs, so NaN/Inf must be found before data moves.
  virtual bool lossy() const { return !payload_.raw(); }
  // Whether sum() takes a CUDA buffer over a host transport itself (powersgd: only its small factors
  // cross to the host) instead of run() staging the whole buffer through the host. Such an algorithm
  // keeps no shared-estimate error feedback in the carrier (ErrorFeedback::finish is not called).
  virtual bool sumsDeviceBuffers() const { return false; }

 protected:
  explicit AllreduceAlgorithm(AllreduceConfig config);
  // Refuses the codec / error feedback this algorithm cannot carry (InvalidArgument naming both).
  void requireLosslessOnly(const char* why) const;
  void requireReencodable() const;
  void requireSourceFeedback() const;
  EncodeContext encodeContext(const Communicator& comm, const OpContext& op, size_t segment) const;

  AllreduceConfig config_;
  PayloadCodec payload_;
  RingScratch scratch_;  // buffers reused across calls
};

}  // namespace gradcomp
