// rseq/initial_env.h: knobs from the environment the process started with,
// for reads that come before libc has set `environ`.
//
// A dynamically linked program's .preinit_array functions run before any
// library's constructor, libc's included, and libc sets `environ` in its
// constructor: a malloc made there finds `environ` NULL, and getenv finds
// nothing.  The kernel keeps the initial environment, which
// /proc/self/environ shows; GetKnob (raw_io.h) reads it there instead.
#ifndef CIDMALLOC_RSEQ_INITIAL_ENV_H_
#define CIDMALLOC_RSEQ_INITIAL_ENV_H_

namespace cidmalloc {

// The value of knob `name` (which starts with "CIDMALLOC_") in the
// process's initial environment, with secure_getenv semantics: nullptr in a
// secure-execution (setuid, setgid, capabilities) process, when the name is
// not there, or when /proc/self/environ cannot be read.  The CIDMALLOC_*
// entries are read once, with raw system calls, into a static buffer of
// 4 KiB; an entry that does not fit in what is left of it is left out (as
// if unset).  Never allocates; preserves errno.
const char* InitialEnvKnob(const char* name);

}  // namespace cidmalloc

#endif  // CIDMALLOC_RSEQ_INITIAL_ENV_H_
