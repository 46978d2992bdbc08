"""cc_static_archive: one static archive of a C++ library and its deps.

Bazel keeps one archive per cc_library (and an alwayslink library as a
.lo), which a cc_binary links; a program built outside Bazel links one
file with a plain -l.  This rule puts the non-PIC object files of every
library in `deps`' transitive link into a single archive, `out`.

The objects are the rule action's inputs, so Bazel builds them for this
configuration before the archive is made.  (`./cidmalloc install` used to
copy them out of the execution root after `bazel build //:cidmalloc`,
which builds only the PIC objects: it picked up whatever non-PIC objects an
earlier build had left there, and an archive of objects from two builds,
which did not link.)
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# Members are named after their package path (allocator/os/_objs/os/check.o
# becomes allocator_os_check.o): unique even where two layers have a file of
# the same name, so that `ar x` gives every member back.  `ar rcsD`:
# deterministic (zero timestamps and ids), with a symbol index.
_ARCHIVE_SCRIPT = """\
set -eu
ar="$1"
out="$2"
shift 2
case "$ar" in /*) ;; *) ar="$PWD/$ar" ;; esac
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for obj in "$@"; do
  name="$(printf '%s\\n' "$obj" |
    sed -e 's|.*/bin/||' -e 's|/_objs/[^/]*/|/|' -e 's|/|_|g')"
  if [ -e "$tmp/$name" ]; then
    echo "cc_static_archive: two objects named $name" >&2
    exit 1
  fi
  cp "$obj" "$tmp/$name"
done
rm -f "$out"
cd "$tmp"
"$ar" rcsD "$out" *.o
"""

def _cc_static_archive_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    objects = []
    for dep in ctx.attr.deps:
        linking = dep[CcInfo].linking_context
        for linker_input in linking.linker_inputs.to_list():
            for library in linker_input.libraries:
                objects.extend(library.objects)
    if not objects:
        fail("cc_static_archive %s: no object files in deps" % ctx.label)
    args = ctx.actions.args()
    args.add(cc_toolchain.ar_executable)
    args.add(ctx.outputs.out)
    args.add_all(objects)
    ctx.actions.run_shell(
        command = _ARCHIVE_SCRIPT,
        arguments = [args],
        inputs = depset(objects, transitive = [cc_toolchain.all_files]),
        outputs = [ctx.outputs.out],
        mnemonic = "CcStaticArchive",
        progress_message = "Archiving %s" % ctx.outputs.out.short_path,
    )
    return [DefaultInfo(files = depset([ctx.outputs.out]))]

cc_static_archive = rule(
    implementation = _cc_static_archive_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "out": attr.output(mandatory = True),
        "_cc_toolchain": attr.label(
            default = "@bazel_tools//tools/cpp:current_cc_toolchain",
        ),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)
