"""Compiler options of the library's layers (//rseq, //allocator/...).

They are set on the targets themselves, not only in .bazelrc: a workspace
that depends on cidmalloc as an external repository (local_repository or
http_archive, then cc_binary(malloc = "@cidmalloc//:cidmalloc")) builds
them with its own .bazelrc, which knows nothing of ours.
"""

# The language the library is written in (constinit, concepts, designated
# initialisers).  .bazelrc sets it for every target of this workspace too.
CIDMALLOC_STD = ["-std=c++20"]

# A layer below the API: only the API layer exports symbols (marked
# visibility("default")); nothing throws, and without landing pads the
# library needs neither libstdc++ nor libgcc_s (see //allocator/api).
LAYER_COPTS = CIDMALLOC_STD + ["-fvisibility=hidden", "-fno-exceptions"]
