"""Tests that run the same sources in several environments.

Many of the tests run one binary's code under several environments (the
rseq mode, knobs, what the test expects).  As a cc_test each, Bazel
compiled the sources once per variant: `bazel aquery` counted 374 compile
actions under //tests (148 with this), most of a fresh build (a CI run's
Bazel step took 616 s).  Here the sources compile once, into a testonly
alwayslink cc_library, and each variant is a cc_test of that library alone
with its own `env`.
"""

load("@rules_cc//cc:defs.bzl", "cc_library", "cc_test")

def _file_names(labels):
    return sorted([str(label).split(":")[-1] for label in labels])

def shared_test_library(name, srcs, deps):
    """The library `srcs` compile into, defined by the first caller only.

    Later callers with the same name must pass the same sources: a second
    set under one name is a mistake in the BUILD file, and fails.

    Args:
      name: the library.
      srcs: its sources (test files and private headers).
      deps: what they need (gtest or gtest_main among them).
    """
    existing = native.existing_rule(name)
    if existing:
        if _file_names(existing["srcs"]) != _file_names(srcs):
            fail("%s: defined with %s, now asked for %s" %
                 (name, existing["srcs"], srcs))
        return
    cc_library(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = deps,
        # Keep every object: the tests register themselves from static
        # initialisers, which nothing refers to.
        alwayslink = True,
        linkstatic = True,
    )

def cc_test_variants(
        name,
        variants,
        srcs,
        deps,
        size = "small",
        malloc = None):
    """One cc_test per entry of `variants`, the sources compiled once.

    Args:
      name: the library the sources compile into (shared_test_library).
      variants: {test name: env}: each test's environment.
      srcs: the sources.
      deps: their dependencies.
      size: every test's Bazel size.
      malloc: the tests' malloc (cc_test's attribute), or None for the
        default.
    """
    shared_test_library(name = name, srcs = srcs, deps = deps)
    for test, env in variants.items():
        cc_test(
            name = test,
            size = size,
            env = env,
            linkstatic = True,
            malloc = malloc,
            deps = [":" + name],
        )
