// tests/rseq/detection.h: what the detection test's sources share
// (detection_test.cc, detection_ids_test.cc, detection_ops_test.cc): the
// expectation for this process's environment and its description.
#ifndef CIDMALLOC_TESTS_RSEQ_DETECTION_H_
#define CIDMALLOC_TESTS_RSEQ_DETECTION_H_

#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rseq/rseq.h"
#include "tests/rseq/stack_table.h"
#include "tests/rseq/test_util.h"

namespace cidmalloc_detection {

using namespace cidmalloc_test;  // NOLINT
namespace rs = ::cidmalloc::rseq;

inline int M(rs::Mode m) { return static_cast<int>(m); }
inline int R(rs::Registration r) { return static_cast<int>(r); }

inline const Expectation& Expected() {
  static const Expectation e = ExpectedForThisProcess();
  return e;
}

inline std::string Describe(const Expectation& e) {
  char buf[256];
  snprintf(buf, sizeof buf,
           "expected: cap=%s registration=%s best=%s mode=%s node_id=%d "
           "fence=%d feature_size=%u (__rseq_size=%u)",
           ModeStr(e.cap), RegStr(e.registration), ModeStr(e.best_mode),
           ModeStr(e.mode), e.has_node_id, e.fence, e.feature_size,
           GlibcRseqSize());
  return buf;
}

}  // namespace cidmalloc_detection

#endif  // CIDMALLOC_TESTS_RSEQ_DETECTION_H_
