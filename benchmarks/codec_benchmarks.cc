// Codec kernels against a memcpy of the same fp32 input, timed in the same binary run. Ratios are
// computed by scripts/bench-ratios from this binary's JSON output (median of repetitions).
//   BM_Memcpy                  the reference: 4n bytes read + 4n written
//   BM_Encode/<codec>          encode n floats
//   BM_DecodeAccumulate/<codec> out += decode(wire)
//   BM_EncodeEf/<codec>        encode fused with error feedback (encodeWithResidual, in place)
//   BM_NthElement / BM_TopKSelect: exact 1 % top-k, std::nth_element vs ours, normal and narrow-range data
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "compressors/registry.h"
#include "compressors/sparse_payload.h"

namespace {

using namespace gradcomp;

constexpr size_t kN = size_t{1} << 24;  // 16M floats

const std::vector<float>& normalData() {
  static const std::vector<float> x = [] {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> d;
    std::vector<float> v(kN);
    for (auto& f : v) f = d(rng);
    return v;
  }();
  return x;
}

const std::vector<float>& narrowData() {  // all values in [1, 1.0001): the hard case for radix top-k
  static const std::vector<float> x = [] {
    std::vector<float> v = normalData();
    for (auto& f : v) f = 1.0f + std::fabs(f) * 1e-5f;
    return v;
  }();
  return x;
}

struct AlignedBytes {
  explicit AlignedBytes(size_t n) : storage(n + 16) {}
  std::span<std::byte> span(size_t n) {
    return {reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.data()) + 15) & ~uintptr_t(15)), n};
  }
  std::vector<std::byte> storage;
};

void setBytes(benchmark::State& s) { s.SetBytesProcessed(static_cast<int64_t>(s.iterations()) * kN * 4); }

void BM_Memcpy(benchmark::State& s) {
  const auto& x = normalData();
  std::vector<float> out(kN, 0.0f);
  for (auto _ : s) {
    std::memcpy(out.data(), x.data(), kN * 4);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  setBytes(s);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

void encodeBench(benchmark::State& s, const std::string& spec, int threads) {
  const auto c = makeCompressor(spec);
  const auto& x = normalData();
  const size_t cap = c->maxEncodedBytes(kN);
  AlignedBytes wire(cap);
  ExecContext exec;
  exec.cpuThreads = threads;
  EncodeContext ctx;
  for (auto _ : s) benchmark::DoNotOptimize(c->encode(x, wire.span(cap), ctx, exec));
  setBytes(s);
}

void decodeAccBench(benchmark::State& s, const std::string& spec, int threads) {
  const auto c = makeCompressor(spec);
  const auto& x = normalData();
  const size_t cap = c->maxEncodedBytes(kN);
  AlignedBytes wire(cap);
  const auto r = c->encode(x, wire.span(cap), {});
  std::vector<float> out(kN, 0.0f);
  ExecContext exec;
  exec.cpuThreads = threads;
  for (auto _ : s) {
    c->decode(wire.span(r.wireBytes), out, DecodeMode::Accumulate, exec);
    benchmark::ClobberMemory();
  }
  setBytes(s);
}

void encodeEfBench(benchmark::State& s, const std::string& spec, int threads) {
  const auto c = makeCompressor(spec);
  const auto& x = normalData();
  const size_t cap = c->maxEncodedBytes(kN);
  AlignedBytes wire(cap);
  std::vector<float> e(kN, 0.0f);
  ExecContext exec;
  exec.cpuThreads = threads;
  // In place, as the `ef` policy calls it.
  for (auto _ : s) benchmark::DoNotOptimize(c->encodeWithResidual(x, e, e, wire.span(cap), {}, exec));
  setBytes(s);
}

void BM_NthElement(benchmark::State& s, bool narrow) {
  const auto& src = narrow ? narrowData() : normalData();
  std::vector<float> work(kN);
  const size_t k = kN / 100;
  for (auto _ : s) {
    std::transform(src.begin(), src.end(), work.begin(), [](float v) { return std::fabs(v); });
    std::nth_element(work.begin(), work.begin() + static_cast<ptrdiff_t>(k), work.end(), std::greater<float>());
    benchmark::DoNotOptimize(work[k]);
  }
  setBytes(s);
}

const std::vector<std::string> kCodecs = {"none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8",
                                          "int8:rounding=stochastic", "qsgd", "terngrad", "topk:ratio=0.01",
                                          "topk:ratio=0.001", "randomk:ratio=0.01", "threshold:ratio=0.01", "sign", "onebit",
                                          "mxfp8", "mxfp8:elem=e5m2", "mxfp6", "mxfp4", "nvfp4", "int4",
                                          "int4:rounding=stochastic", "int4:rotate=hadamard",
                                          // stochastic rounding with 8-bit uniforms (half the Philox calls)
                                          "int8:rounding=stochastic,rounding_bits=8", "qsgd:rounding_bits=8",
                                          "terngrad:rounding_bits=8", "int4:rounding=stochastic,rounding_bits=8"};

int registerAll() {
  for (const auto& spec : kCodecs) {
    for (int threads : {1, 2}) {
      const std::string suffix = spec + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("BM_Encode/" + suffix).c_str(), encodeBench, spec, threads)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark(("BM_DecodeAccumulate/" + suffix).c_str(), decodeAccBench, spec, threads)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark(("BM_EncodeEf/" + suffix).c_str(), encodeEfBench, spec, threads)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("BM_NthElement/normal", BM_NthElement, false)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_NthElement/narrow", BM_NthElement, true)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (bool narrow : {false, true}) {
    // The codec's exact selection (sampled bound + filter, radix fallback) at k = 1 %, same data as
    // BM_NthElement.
    benchmark::RegisterBenchmark(narrow ? "BM_TopKSelect/narrow" : "BM_TopKSelect/normal",
                                 [narrow](benchmark::State& s) {
                                   const auto& x = narrow ? narrowData() : normalData();
                                   for (auto _ : s) benchmark::DoNotOptimize(selectTopK(x, kN / 100));
                                   setBytes(s);
                                 })
        ->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  return 0;
}
const int kRegistered = registerAll();

}  // namespace

BENCHMARK_MAIN();
