#!/usr/bin/env bash
# tests/bazel_consumer_test.sh: cidmalloc used from another Bazel workspace,
# as a service's build uses it.  Run by `./cidmalloc test` (the tests/*.sh
# hook) from the repository root; also on its own.
#
# A scratch workspace declares this repository as
# local_repository(name = "cidmalloc") and builds
#   cc_binary(malloc = "@cidmalloc//:cidmalloc",
#             deps = ["@cidmalloc//:cidmalloc"])
# from a C++ program that includes <cidmalloc.h>.  That workspace has none
# of this repository's .bazelrc (-std=c++20, -c opt, warnings): the
# library's targets must carry what they need (build_defs/copts.bzl), and
# it is built as Bazel builds by default (fastbuild, -O0) and with -c opt.
# Each build's program must define malloc itself, run threads whose blocks
# keep their bytes, and report through cidmalloc_get_stats and the
# CIDMALLOC_STATS=1 summary the mode `./cidmalloc info` finds.
#
# The scratch workspace has its own Bazel output base (a second server, shut
# down at the end) under ${XDG_CACHE_HOME:-~/.cache}/cidmalloc-consumer, so
# that a second run only rebuilds what changed.  Exits 77 (skipped) without
# bazel, 0 when every check passed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT="$PWD"
BAZEL="${BAZEL:-bazel}"
command -v "$BAZEL" >/dev/null || { echo "SKIP: no $BAZEL"; exit 77; }

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cidmalloc-consumer"
WS="$CACHE/workspace"
OUTPUT_BASE="$CACHE/output_base"
mkdir -p "$WS" || exit 1
FAILED=0
fail() {
  echo "FAIL: $*"
  FAILED=1
}
consumer_bazel() {
  (cd "$WS" && "$BAZEL" --output_base="$OUTPUT_BASE" "$@" </dev/null)
}
trap 'consumer_bazel shutdown >/dev/null 2>&1' EXIT

# Offline, Debian's Bazel 4.2.3 needs these three repositories in every
# workspace (README, "Bazel"); the consumer takes this repository's.  Its
# .bazelrc only quiets Debian's sandbox debugging, as ours does.
cat >"$WS/WORKSPACE" <<EOF
workspace(name = "consumer")

local_repository(name = "rules_java", path = "/usr/share/bazel/rules/java")

local_repository(name = "rules_cc", path = "$ROOT/third_party/rules_cc")

local_repository(
    name = "remote_coverage_tools",
    path = "$ROOT/third_party/remote_coverage_tools",
)

local_repository(name = "cidmalloc", path = "$ROOT")
EOF
cat >"$WS/.bazelrc" <<'EOF'
build --nosandbox_debug
build --spawn_strategy=processwrapper-sandbox
EOF
cat >"$WS/BUILD" <<'EOF'
cc_binary(
    name = "service",
    srcs = ["service.cc"],
    malloc = "@cidmalloc//:cidmalloc",
    deps = ["@cidmalloc//:cidmalloc"],
)
EOF
cat >"$WS/service.cc" <<'EOF'
// Four threads fill vectors of strings of 20-219 bytes, check every
// string's bytes and free them; then the statistics.
#include <cidmalloc.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {
bool Churn(int seed) {
  std::vector<std::string> v;
  for (int i = 0; i < 50000; ++i) {
    v.emplace_back(20 + (i + seed) % 200, static_cast<char>('a' + i % 26));
  }
  for (int i = 0; i < 50000; ++i) {
    const std::string& s = v[i];
    if (s.size() != static_cast<size_t>(20 + (i + seed) % 200)) return false;
    for (char c : s) {
      if (c != static_cast<char>('a' + i % 26)) return false;
    }
  }
  return true;
}
}  // namespace

int main() {
  bool ok[4];
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&ok, t] { ok[t] = Churn(t); });
  }
  for (std::thread& t : threads) t.join();
  for (bool b : ok) {
    if (!b) {
      std::puts("a string lost its bytes");
      return 1;
    }
  }
  cidmalloc_stats s;
  if (cidmalloc_get_stats(&s) != 0 || s.mode == nullptr) {
    std::puts("no cidmalloc stats");
    return 1;
  }
  std::printf("mode %s, %u slab(s), %llu mallocs counted\n", s.mode, s.slabs,
              static_cast<unsigned long long>(s.mallocs));
  return s.slabs >= 1 && s.mallocs >= 200000 ? 0 : 1;
}
EOF

# The mode this machine gives (cid, cpu or none), as the library reports it.
want_mode="$(CIDMALLOC_STATS=1 ./cidmalloc run -- true 2>&1 >/dev/null |
  sed -nE 's/^cidmalloc: mode ([a-z]+) .*/\1/p')"
[[ -n "$want_mode" ]] || { echo "FAIL: ./cidmalloc run -- true gave no mode"; exit 1; }

for mode in fastbuild opt; do
  log="$CACHE/build-$mode.log"
  if ! consumer_bazel build -c "$mode" //:service >"$log" 2>&1; then
    tail -n 30 "$log"
    fail "-c $mode: bazel build of the consumer failed"
    continue
  fi
  bin="$(consumer_bazel info -c "$mode" bazel-bin 2>/dev/null)/service"
  # grep -q on nm's whole output, not on a pipe: under pipefail, grep -q
  # exiting at its match gives nm, still writing, SIGPIPE, and the pipeline
  # fails: it did in a CI run here, for -c fastbuild, and then for both.
  if ! grep -qE ' T malloc$' <<<"$(nm "$bin")"; then
    fail "-c $mode: the program does not define malloc"
    continue
  fi
  out="$(CIDMALLOC_STATS=1 timeout -k 5 120 "$bin" 2>"$CACHE/run-$mode.err")"
  rc=$?
  if ((rc != 0)); then
    fail "-c $mode: exit status $rc: $out"
    tail -n 5 "$CACHE/run-$mode.err"
    continue
  fi
  if [[ "$out" != "mode $want_mode,"* ]]; then
    fail "-c $mode: '$out', want mode $want_mode"
    continue
  fi
  if ! grep -q "^cidmalloc: mode $want_mode " "$CACHE/run-$mode.err"; then
    fail "-c $mode: no CIDMALLOC_STATS=1 summary of mode $want_mode at exit"
    continue
  fi
  echo "ok: -c $mode: $out"
done
exit "$FAILED"
