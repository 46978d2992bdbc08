#!/usr/bin/env python3
"""tests/vm/cross_build.py: builds Bazel test targets for another
architecture with a cross compiler, by replaying Bazel's own compile and
link actions (`bazel aquery`) with the cross compiler instead of the host's.

Debian's Bazel 4.2.3 has no AArch64 toolchain, so tests/vm/arm64.sh uses
this to build the gtest binaries its VM runs: the same sources, defines,
include paths and link order as the x86-64 targets, compiled in Bazel's
workspace root (their paths are relative to it; external headers are
Debian's, under /usr/include).  GoogleTest
comes from Debian's sources (/usr/src/googletest), built once with the
cross compiler into GTEST_DIR.

  cross_build.py --out DIR --gtest GTEST_DIR --cxx aarch64-linux-gnu-g++ \\
      LABEL...

Each LABEL's binary goes to DIR/<package>/<name> (as bazel-bin does).
Objects are compiled again only where the source or a header it read (the
compiler's depfile) is newer.  Exit status 1 on any failure.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

# Host-only flags of Bazel's actions: the host's linker directory (it would
# make the cross compiler run /usr/bin/ld) and the depfile, which is
# written to our own path instead.
DROP = {"-B/usr/bin"}
DROP_WITH_NEXT = {"-MF"}


def bazel(*args):
    return subprocess.run(["bazel", *args], check=True, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL).stdout


def aquery(expr):
    out = bazel("aquery", "-c", "opt", expr, "--output=jsonproto")
    return json.loads(out).get("actions", [])


def newer_deps(obj, depfile):
    """True if obj is missing or a file its depfile lists is newer."""
    try:
        t = os.path.getmtime(obj)
        with open(depfile) as f:
            text = f.read().replace("\\\n", " ")
    except OSError:
        return True
    for dep in text.split(":", 1)[-1].split():
        try:
            if os.path.getmtime(dep) > t:
                return True
        except OSError:
            return True
    return False


def compile_action(args, cxx, out):
    """Compiles one CppCompile action's source; returns (obj, error)."""
    obj = args[args.index("-o") + 1]
    dst = os.path.join(out, obj)
    dep = dst + ".d"
    if not newer_deps(dst, dep):
        return obj, None
    cmd = [cxx]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in DROP_WITH_NEXT:
            skip = True
            continue
        if a in DROP or a.startswith("-frandom-seed="):
            continue
        cmd.append(a)
    cmd[cmd.index("-o") + 1] = dst
    # No debug info (the actions ask for -g): a third less compile time,
    # and the VM strips it anyway.
    cmd += ["-MF", dep, "-g0"]
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return obj, f"{' '.join(cmd)}\n{r.stderr}"
    return obj, None


def link_action(args, cxx, out, gtest, objects):
    """Links one CppLink action with the cross-compiled objects."""
    binary = args[args.index("-o") + 1]
    cmd = [cxx]
    for a in args[1:]:
        if a in DROP or a.startswith("@"):
            continue
        if a in objects:
            a = os.path.join(out, a)
        cmd.append(a)
    cmd[cmd.index("-o") + 1] = os.path.join(out, binary)
    cmd += ["-L", gtest]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return f"{' '.join(cmd)}\n{r.stderr}"
    return None


def build_gtest(cxx, gtest):
    """libgtest.a and libgtest_main.a from Debian's GoogleTest sources."""
    src = "/usr/src/googletest/googletest"
    os.makedirs(gtest, exist_ok=True)
    for name, unit in (("gtest", "gtest-all.cc"),
                       ("gtest_main", "gtest_main.cc")):
        lib = os.path.join(gtest, f"lib{name}.a")
        if os.path.exists(lib):
            continue
        obj = os.path.join(gtest, f"{name}.o")
        subprocess.run([cxx, "-std=c++20", "-O2", "-I", f"{src}/include",
                        "-I", src, "-pthread", "-c", f"{src}/src/{unit}",
                        "-o", obj], check=True)
        ar = cxx.replace("g++", "ar") if "g++" in cxx else "ar"
        subprocess.run([ar, "rcs", lib + ".tmp", obj], check=True)
        os.rename(lib + ".tmp", lib)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--gtest", required=True)
    p.add_argument("--cxx", required=True)
    p.add_argument("labels", nargs="+")
    o = p.parse_args()
    out, gtest = os.path.abspath(o.out), os.path.abspath(o.gtest)
    build_gtest(o.cxx, gtest)
    targets = "set(" + " ".join(o.labels) + ")"
    compiles = aquery(f'mnemonic("CppCompile", deps({targets}))')
    links = aquery(f'mnemonic("CppLink", {targets})')
    # The workspace: its sources, and bazel-out (generated headers) through
    # the convenience link.  (Bazel's execution root holds links only to
    # what its last command needed.)
    os.chdir(bazel("info", "workspace").strip())
    # Bazel compiles each source twice (PIC and not); the links name one.
    by_obj = {}
    for a in compiles:
        args = a["arguments"]
        by_obj[args[args.index("-o") + 1]] = args
    needed = set()
    for a in links:
        needed.update(x for x in a["arguments"] if x in by_obj)
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        for obj, err in ex.map(lambda k: compile_action(by_obj[k], o.cxx, out),
                               sorted(needed)):
            if err:
                failed += 1
                print(f"cross_build.py: {obj} does not compile:\n{err}",
                      file=sys.stderr)
    if failed:
        return 1
    for a in links:
        err = link_action(a["arguments"], o.cxx, out, gtest, by_obj)
        if err:
            failed += 1
            print(f"cross_build.py: link failed:\n{err}", file=sys.stderr)
    print(f"cross_build.py: {len(needed)} objects, {len(links)} binaries, "
          f"{failed} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
