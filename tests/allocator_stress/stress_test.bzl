"""stress_test: the cc_test of tests/allocator_stress, with what all share."""

load("@rules_cc//cc:defs.bzl", "cc_test")
load("//build_defs:test_variants.bzl", "shared_test_library")

# What every stress test links: the package's helpers, cidmalloc itself (the
# binary's malloc, free, new and delete), its API header, the front end's
# headers (the size classes' and run stacks' bounds the tests' sizes come
# from), the re-exec under a seccomp filter that denies rseq
# (TEST_DENY_RSEQ), and gtest's main.
DEPS = [
    ":stress_util",
    "//:cidmalloc",
    "//allocator/api",
    "//allocator/front_end",
    "//tests/common:deny_rseq",
    "@com_google_googletest//:gtest_main",
]

def stress_test(name, srcs, env, size = "small"):
    """A test of this package, linked statically with DEPS.

    The sources compile once for all the tests that run them (the library
    <first .cc without .cc>_srcs, build_defs/test_variants.bzl); each test
    differs only in its environment.

    Args:
      name: the target.
      srcs: its sources.
      env: the environment the test process starts with (the mode, knobs and
        EXPECT_* values; BUILD's MODES).
      size: Bazel's test size.
    """
    first = [src for src in srcs if src.endswith(".cc")][0]
    library = first[:-len(".cc")] + "_srcs"
    shared_test_library(name = library, srcs = srcs, deps = DEPS)
    cc_test(
        name = name,
        size = size,
        env = env,
        linkstatic = True,
        deps = [":" + library],
    )
