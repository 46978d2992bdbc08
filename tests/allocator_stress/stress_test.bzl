"""stress_test: the cc_test of tests/allocator_stress, with what all share."""

load("@rules_cc//cc:defs.bzl", "cc_test")

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

    Args:
      name: the target.
      srcs: its sources.
      env: the environment the test process starts with (the mode, knobs and
        EXPECT_* values; BUILD's MODES).
      size: Bazel's test size.
    """
    cc_test(
        name = name,
        size = size,
        srcs = srcs,
        env = env,
        linkstatic = True,
        deps = DEPS,
    )
