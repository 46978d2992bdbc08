// tests/allocator/config_test: the CIDMALLOC_* knobs (allocator/os/config.h).
//
// os::LoadConfig is called directly after setenv (it reads the environment
// each time); the allocator itself is not linked, so its own initialisation
// plays no part.  Invalid values must print exactly one warning line on
// stderr and keep the default.
//
// That README.md documents every knob cannot be checked from inside Bazel's
// sandbox; //tests/allocator:print_knobs prints the table for a check
// outside it.
#include <stdlib.h>

#include <set>
#include <string>

#include "allocator/os/config.h"
#include "gtest/gtest.h"
#include "tests/allocator/test_util.h"

namespace {

using cidmalloc::os::Config;
using cidmalloc::os::KnobInfo;
using cidmalloc::os::Knobs;
using cidmalloc::os::LoadConfig;
using cidmalloc::os::NumaPolicy;
using cidmalloc::os::ParseBytes;
using cidmalloc::os::ReleaseMethod;
using cidmalloc_test::FdCapture;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = kKiB * 1024;
constexpr size_t kGiB = kMiB * 1024;

const char* const kAllKnobs[] = {
    "CIDMALLOC_RSEQ_MODE",   "CIDMALLOC_RSEQ_NODE_IDS", "CIDMALLOC_NUMA_POLICY",
    "CIDMALLOC_CACHE_BYTES", "CIDMALLOC_CACHE_IDLE_MS",
    "CIDMALLOC_RELEASE_BYTES",
    "CIDMALLOC_RELEASE_DELAY_MS", "CIDMALLOC_RELEASE_METHOD",
    "CIDMALLOC_HUGE_PAGES", "CIDMALLOC_STATS", "CIDMALLOC_RSEQ_SOFT",
    "CIDMALLOC_BACKGROUND_THREAD",
};

class ConfigTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* k : kAllKnobs) unsetenv(k);
  }
  void TearDown() override {
    for (const char* k : kAllKnobs) unsetenv(k);
  }

  // LoadConfig with `name`=`value` set; returns what it wrote on stderr.
  std::string Load(const char* name, const char* value, Config* c) {
    setenv(name, value, 1);
    FdCapture capture(2);
    EXPECT_TRUE(capture.ok());
    LoadConfig(c);
    std::string text = capture.Finish();
    unsetenv(name);
    return text;
  }

  // Expects exactly the one-line warning for name=value.
  static void ExpectWarning(const std::string& text, const char* name,
                            const char* value) {
    const std::string line = std::string("cidmalloc: warning: ") + name + "=" +
                             value + " is invalid; using the default\n";
    EXPECT_EQ(text, line);
  }

  static void ExpectDefaults(const Config& c) {
    const Config d;
    EXPECT_EQ(c.numa_policy, d.numa_policy);
    EXPECT_EQ(c.release_method, d.release_method);
    EXPECT_EQ(c.cache_bytes, d.cache_bytes);
    EXPECT_EQ(c.cache_idle_ms, d.cache_idle_ms);
    EXPECT_EQ(c.release_threshold, d.release_threshold);
    EXPECT_EQ(c.release_delay_ms, d.release_delay_ms);
    EXPECT_EQ(c.huge_pages, d.huge_pages);
    EXPECT_EQ(c.background_thread, d.background_thread);
    EXPECT_EQ(c.stats, d.stats);
    EXPECT_EQ(c.stats_classes, d.stats_classes);
  }
};

TEST_F(ConfigTest, DefaultsWithAnEmptyEnvironment) {
  Config c;
  c.numa_policy = NumaPolicy::kOff;  // LoadConfig must reset everything.
  c.cache_bytes = 1;
  c.release_delay_ms = 7;
  c.stats = true;
  FdCapture capture(2);
  LoadConfig(&c);
  EXPECT_EQ(capture.Finish(), "");
  EXPECT_EQ(c.numa_policy, NumaPolicy::kBind);
  EXPECT_EQ(c.release_method, ReleaseMethod::kDontNeed);
  EXPECT_EQ(c.cache_bytes, 1 * kMiB);
  EXPECT_EQ(c.release_threshold, 32 * kMiB);
  EXPECT_EQ(c.release_delay_ms, 1000u);
  EXPECT_FALSE(c.stats);
}

TEST_F(ConfigTest, NumaPolicy) {
  Config c;
  EXPECT_EQ(Load("CIDMALLOC_NUMA_POLICY", "bind", &c), "");
  EXPECT_EQ(c.numa_policy, NumaPolicy::kBind);
  EXPECT_EQ(Load("CIDMALLOC_NUMA_POLICY", "preferred", &c), "");
  EXPECT_EQ(c.numa_policy, NumaPolicy::kPreferred);
  EXPECT_EQ(Load("CIDMALLOC_NUMA_POLICY", "off", &c), "");
  EXPECT_EQ(c.numa_policy, NumaPolicy::kOff);
  for (const char* bad : {"", "BIND", "bind ", "interleave", "1"}) {
    SCOPED_TRACE(bad);
    ExpectWarning(Load("CIDMALLOC_NUMA_POLICY", bad, &c),
                  "CIDMALLOC_NUMA_POLICY", bad);
    ExpectDefaults(c);
  }
}

TEST_F(ConfigTest, ReleaseMethod) {
  Config c;
  EXPECT_EQ(Load("CIDMALLOC_RELEASE_METHOD", "free", &c), "");
  EXPECT_EQ(c.release_method, ReleaseMethod::kFree);
  EXPECT_EQ(Load("CIDMALLOC_RELEASE_METHOD", "dontneed", &c), "");
  EXPECT_EQ(c.release_method, ReleaseMethod::kDontNeed);
  for (const char* bad : {"", "FREE", "madv_free", "dont_need"}) {
    SCOPED_TRACE(bad);
    ExpectWarning(Load("CIDMALLOC_RELEASE_METHOD", bad, &c),
                  "CIDMALLOC_RELEASE_METHOD", bad);
    ExpectDefaults(c);
  }
}

// The on/off knobs (one parser, LoadOnOff), each with its own default.
TEST_F(ConfigTest, OnOffKnobs) {
  struct Knob {
    const char* name;
    bool Config::*field;
    bool default_value;
  };
  for (const Knob& k : {Knob{"CIDMALLOC_HUGE_PAGES", &Config::huge_pages, true},
                        Knob{"CIDMALLOC_BACKGROUND_THREAD",
                             &Config::background_thread, false}}) {
    SCOPED_TRACE(k.name);
    Config c;
    EXPECT_EQ(c.*k.field, k.default_value);
    EXPECT_EQ(Load(k.name, "off", &c), "");
    EXPECT_FALSE(c.*k.field);
    EXPECT_EQ(Load(k.name, "on", &c), "");
    EXPECT_TRUE(c.*k.field);
    for (const char* bad : {"", "ON", "1", "yes", "true", "off "}) {
      SCOPED_TRACE(bad);
      c.*k.field = !k.default_value;
      ExpectWarning(Load(k.name, bad, &c), k.name, bad);
      ExpectDefaults(c);
    }
  }
}

TEST_F(ConfigTest, ByteKnobs) {
  for (const char* knob : {"CIDMALLOC_CACHE_BYTES", "CIDMALLOC_RELEASE_BYTES"}) {
    SCOPED_TRACE(knob);
    const bool cache = std::string(knob) == "CIDMALLOC_CACHE_BYTES";
    Config c;
    const std::pair<const char*, size_t> good[] = {
        {"0", 0},           {"4096", 4096},   {"64k", 64 * kKiB},
        {"64K", 64 * kKiB}, {"2m", 2 * kMiB}, {"2M", 2 * kMiB},
        {"1g", kGiB},       {"3G", 3 * kGiB}};
    for (const auto& [text, bytes] : good) {
      EXPECT_EQ(Load(knob, text, &c), "") << text;
      EXPECT_EQ(cache ? c.cache_bytes : c.release_threshold, bytes) << text;
    }
    for (const char* bad : {"", "k", "-1", "1.5M", "12kb", " 1", "1 ", "1T",
                            "0x10", "M1", "99999999999999999999"}) {
      SCOPED_TRACE(bad);
      ExpectWarning(Load(knob, bad, &c), knob, bad);
      ExpectDefaults(c);
    }
  }
}

// The two millisecond knobs: the same syntax and bounds.
TEST_F(ConfigTest, Milliseconds) {
  struct Knob {
    const char* name;
    uint32_t Config::*field;
  };
  for (const Knob& k : {Knob{"CIDMALLOC_RELEASE_DELAY_MS", &Config::release_delay_ms},
                        Knob{"CIDMALLOC_CACHE_IDLE_MS", &Config::cache_idle_ms}}) {
    SCOPED_TRACE(k.name);
    Config c;
    const std::pair<const char*, uint32_t> good[] = {
        {"0", 0}, {"1", 1}, {"250", 250}, {"0010", 10}, {"3600000", 3600000}};
    for (const auto& [text, ms] : good) {
      EXPECT_EQ(Load(k.name, text, &c), "") << text;
      EXPECT_EQ(c.*k.field, ms) << text;
    }
    for (const char* bad : {"", "-1", "+5", "1s", "1.5", " 1", "1 ", "0x10",
                            "3600001", "99999999999999999999999"}) {
      SCOPED_TRACE(bad);
      ExpectWarning(Load(k.name, bad, &c), k.name, bad);
      ExpectDefaults(c);
    }
  }
}

TEST(ParseUint, BoundsWithoutOverflow) {
  using cidmalloc::os::ParseUint;
  uint64_t out = 12345;
  EXPECT_TRUE(ParseUint("18446744073709551615", UINT64_MAX, &out));
  EXPECT_EQ(out, UINT64_MAX);
  out = 12345;
  EXPECT_FALSE(ParseUint("18446744073709551616", UINT64_MAX, &out));
  EXPECT_FALSE(ParseUint("6", 5, &out));
  EXPECT_FALSE(ParseUint("", 5, &out));
  EXPECT_FALSE(ParseUint(nullptr, 5, &out));
  EXPECT_EQ(out, 12345u);
  EXPECT_TRUE(ParseUint("5", 5, &out));
  EXPECT_EQ(out, 5u);
}

TEST_F(ConfigTest, Stats) {
  Config c;
  EXPECT_EQ(Load("CIDMALLOC_STATS", "1", &c), "");
  EXPECT_TRUE(c.stats);
  EXPECT_FALSE(c.stats_classes);
  EXPECT_EQ(Load("CIDMALLOC_STATS", "2", &c), "");
  EXPECT_TRUE(c.stats);
  EXPECT_TRUE(c.stats_classes);
  EXPECT_EQ(Load("CIDMALLOC_STATS", "0", &c), "");
  EXPECT_FALSE(c.stats);
  EXPECT_FALSE(c.stats_classes);
  for (const char* bad : {"", "yes", "true", "3", "01", "02"}) {
    SCOPED_TRACE(bad);
    ExpectWarning(Load("CIDMALLOC_STATS", bad, &c), "CIDMALLOC_STATS", bad);
    ExpectDefaults(c);
  }
}

TEST_F(ConfigTest, SeveralKnobsAtOnceAndOneWarningPerInvalidKnob) {
  setenv("CIDMALLOC_NUMA_POLICY", "preferred", 1);
  setenv("CIDMALLOC_CACHE_BYTES", "256k", 1);
  setenv("CIDMALLOC_RELEASE_BYTES", "lots", 1);
  setenv("CIDMALLOC_RELEASE_METHOD", "free", 1);
  setenv("CIDMALLOC_STATS", "maybe", 1);
  Config c;
  FdCapture capture(2);
  LoadConfig(&c);
  const std::string text = capture.Finish();
  EXPECT_EQ(c.numa_policy, NumaPolicy::kPreferred);
  EXPECT_EQ(c.cache_bytes, 256 * kKiB);
  EXPECT_EQ(c.release_threshold, Config().release_threshold);
  EXPECT_EQ(c.release_method, ReleaseMethod::kFree);
  EXPECT_FALSE(c.stats);
  EXPECT_EQ(text,
            "cidmalloc: warning: CIDMALLOC_RELEASE_BYTES=lots is invalid; "
            "using the default\n"
            "cidmalloc: warning: CIDMALLOC_STATS=maybe is invalid; using the "
            "default\n");
}

TEST(ParseBytes, Accepted) {
  const std::pair<const char*, size_t> cases[] = {
      {"0", 0},
      {"1", 1},
      {"4096", 4096},
      {"007", 7},
      {"1k", kKiB},
      {"1K", kKiB},
      {"64k", 64 * kKiB},
      {"1m", kMiB},
      {"2M", 2 * kMiB},
      {"1g", kGiB},
      {"16G", 16 * kGiB},
      {"0k", 0},
      // The documented ceiling: 2^50 bytes (1 PiB) in any unit.
      {"1125899906842624", size_t{1} << 50},
      {"1048576G", size_t{1} << 50},
      {"1073741824M", size_t{1} << 50},
  };
  for (const auto& [text, bytes] : cases) {
    size_t out = 12345;
    EXPECT_TRUE(ParseBytes(text, &out)) << text;
    EXPECT_EQ(out, bytes) << text;
  }
}

TEST(ParseBytes, RejectedAndOutputUntouched) {
  const char* const cases[] = {
      "",      "k",      "M",     "-1",   "+1",   " 1",  "1 ",   "1.5",
      "1.5M",  "12kb",   "1KiB",  "1T",   "1P",   "0x10", "1e6",  "1kk",
      "1k1",   "abc",    "1125899906842625",  // 2^50 + 1
      "1048577G",  "1073741825M", "1099511627777k",
      "99999999999999999999", "18446744073709551616",
      "999999999999999999999999999999"};
  for (const char* text : cases) {
    size_t out = 12345;
    EXPECT_FALSE(ParseBytes(text, &out)) << "'" << text << "'";
    EXPECT_EQ(out, 12345u) << "'" << text << "'";
  }
  size_t out = 12345;
  EXPECT_FALSE(ParseBytes(nullptr, &out));
  EXPECT_EQ(out, 12345u);
}

TEST(Knobs, TableIsCompleteAndWellFormed) {
  size_t count = 0;
  const KnobInfo* table = Knobs(&count);
  ASSERT_NE(table, nullptr);
  std::set<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    SCOPED_TRACE(i);
    ASSERT_NE(table[i].name, nullptr);
    ASSERT_NE(table[i].values, nullptr);
    ASSERT_NE(table[i].default_value, nullptr);
    ASSERT_NE(table[i].help, nullptr);
    const std::string name = table[i].name;
    EXPECT_EQ(name.rfind("CIDMALLOC_", 0), 0u) << name;
    EXPECT_NE(std::string(table[i].values), "") << name;
    EXPECT_NE(std::string(table[i].default_value), "") << name;
    EXPECT_NE(std::string(table[i].help), "") << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate " << name;
  }
  // Every knob the code reads is in the table, and nothing else.
  EXPECT_EQ(names, std::set<std::string>(std::begin(kAllKnobs),
                                         std::end(kAllKnobs)));
}

TEST_F(ConfigTest, EveryTableKnobButTheRseqOnesIsReadByLoadConfig) {
  // Set each knob to an invalid value: LoadConfig must complain about it,
  // which proves it reads it.  CIDMALLOC_RSEQ_MODE, _NODE_IDS and _SOFT
  // are read by the rseq layer, before any allocation.
  size_t count = 0;
  const KnobInfo* table = Knobs(&count);
  for (size_t i = 0; i < count; ++i) {
    const std::string name = table[i].name;
    if (name == "CIDMALLOC_RSEQ_MODE" || name == "CIDMALLOC_RSEQ_NODE_IDS" ||
        name == "CIDMALLOC_RSEQ_SOFT") {
      continue;
    }
    Config c;
    const std::string text = Load(table[i].name, "\x01invalid", &c);
    EXPECT_NE(text.find(name + "=\x01invalid is invalid"), std::string::npos)
        << name << ": " << text;
  }
}

}  // namespace
