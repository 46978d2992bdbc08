// Smoke binary: Google Benchmark (Debian libbenchmark-dev) compiles and links.
#include <benchmark/benchmark.h>

namespace {

void BM_Increment(benchmark::State& state) {
  int x = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(++x);
  }
}
BENCHMARK(BM_Increment);

}  // namespace
