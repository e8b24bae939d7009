#include "experiments/codecs_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <random>

#include "compressors/registry.h"
#include "core/random_data.h"
#include "core/timing.h"
#include "kernels/cpu/compiled_isa.h"
#include "kernels/cpu/cpu_path.h"

namespace gradcomp {
namespace {

struct Row {
  std::string codec;
  double bitsPerElement, ratio, relError, encodeGBs, decodeGBs;
  size_t wireBytes;
};

}  // namespace

void runCodecsCommand(const CodecsOptions& o, std::ostream& out) {
  if (!o.cpuPath.empty()) cpu::setCpuPath(cpu::parseCpuPath(o.cpuPath.c_str()));
  std::vector<std::string> specs = o.codecs.empty() ? codecNames() : o.codecs;
  const std::vector<float> x = normalVector(o.numElements, o.seed);
  std::vector<float> decoded(o.numElements);
  double xNorm = 0;
  for (float v : x) xNorm += double(v) * v;
  xNorm = std::sqrt(xNorm);
  const double inputBytes = 4.0 * static_cast<double>(x.size());

  std::vector<Row> rows;
  for (const auto& spec : specs) {
    const auto codec = makeCompressor(spec);
    EncodeContext ctx;
    ctx.seed = o.seed;
    const size_t cap = codec->maxEncodedBytes(x.size(), ctx);
    std::vector<std::byte> storage(cap + 16);
    auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.data()) + 15) & ~uintptr_t(15));
    const std::span<std::byte> wire(aligned, cap);
    EncodeResult r;
    const double tEnc = medianSeconds(o.repeats, [&] { r = codec->encode(x, wire, ctx); });
    const auto used = wire.first(r.wireBytes);
    const double tDec = medianSeconds(o.repeats, [&] { codec->decode(used, decoded, DecodeMode::Overwrite); });
    double err = 0;
    for (size_t i = 0; i < x.size(); ++i) err += double(decoded[i] - x[i]) * (decoded[i] - x[i]);
    rows.push_back({spec, 8.0 * double(r.wireBytes) / double(std::max<size_t>(1, x.size())),
                    inputBytes / double(r.wireBytes), xNorm > 0 ? std::sqrt(err) / xNorm : 0.0,
                    inputBytes / tEnc / 1e9, inputBytes / tDec / 1e9, r.wireBytes});
  }

  if (o.csv) {
    out << "codec,bits_per_element,wire_bytes,compression_ratio,relative_l2_error,encode_GBps,decode_GBps,cpu_path\n";
    for (const auto& r : rows)
      out << r.codec << ',' << r.bitsPerElement << ',' << r.wireBytes << ',' << r.ratio << ',' << r.relError << ','
          << r.encodeGBs << ',' << r.decodeGBs << ',' << cpu::cpuPathName(cpu::activeCpuPath()) << '\n';
    return;
  }
  out << "gradcomp codecs: " << x.size() << " fp32 values ~ N(0,1), seed " << o.seed << ", single thread, median of "
      << o.repeats << " runs (GB/s of fp32 input)\n";
  out << "CPU kernel path: " << cpu::cpuPathName(cpu::activeCpuPath()) << " (this CPU supports "
      << cpu::cpuPathName(cpu::supportedCpuPath()) << "; the casts dispatch at run time, the other kernels use the "
      << cpu::compiledVectorPaths() << " paths compiled in)\n\n";
  out << std::left << std::setw(22) << "codec" << std::right << std::setw(10) << "bits/elem" << std::setw(14)
      << "wire bytes" << std::setw(10) << "ratio" << std::setw(12) << "rel L2 err" << std::setw(12) << "enc GB/s"
      << std::setw(12) << "dec GB/s" << "\n";
  for (const auto& r : rows)
    out << std::left << std::setw(22) << r.codec << std::right << std::fixed << std::setprecision(3) << std::setw(10)
        << r.bitsPerElement << std::setw(14) << r.wireBytes << std::setprecision(1) << std::setw(10) << r.ratio
        << std::setprecision(4) << std::setw(12) << r.relError << std::setprecision(2) << std::setw(12) << r.encodeGBs
        << std::setw(12) << r.decodeGBs << "\n";
}

}  // namespace gradcomp
