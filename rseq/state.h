// rseq/state.h: process-wide and per-thread rseq state.
//
// Every global of the rseq layer and the allocator is `constinit`: the
// first malloc can run inside another library's static constructors, before
// this code's own dynamic initialisers, which would then reset the state.
//
// The process state is written once by Init() (and again only in a fork
// child, which has a single thread) and read without synchronisation by the
// fast paths afterwards.  The per-thread state is initial-exec TLS.
#ifndef CIDMALLOC_RSEQ_STATE_H_
#define CIDMALLOC_RSEQ_STATE_H_

#include <stdint.h>

#include <atomic>

#include "rseq/abi.h"

// The architectures with critical sections written (rseq/cs_x86_64_asm.h,
// rseq/cs_aarch64_asm.h); elsewhere, or with CIDMALLOC_RSEQ_FORCE_PORTABLE,
// the soft-ID paths serve (rseq/cs_none.h).  AArch64 little-endian only:
// the wide sections load the low 16 bits of mm_cid from its first bytes.
#if defined(__x86_64__) && !defined(CIDMALLOC_RSEQ_FORCE_PORTABLE)
#define CIDMALLOC_RSEQ_X86_64 1
#else
#define CIDMALLOC_RSEQ_X86_64 0
#endif
#if defined(__aarch64__) && defined(__AARCH64EL__) && \
    !defined(CIDMALLOC_RSEQ_FORCE_PORTABLE)
#define CIDMALLOC_RSEQ_AARCH64 1
#else
#define CIDMALLOC_RSEQ_AARCH64 0
#endif
#define CIDMALLOC_RSEQ_SECTIONS \
  (CIDMALLOC_RSEQ_X86_64 || CIDMALLOC_RSEQ_AARCH64)

#define CIDMALLOC_TLS_IE __attribute__((tls_model("initial-exec")))
#define CIDMALLOC_HIDDEN __attribute__((visibility("hidden")))
#define CIDMALLOC_LIKELY(x) __builtin_expect(!!(x), 1)
#define CIDMALLOC_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace cidmalloc::rseq {

// Which ID indexes per-ID data.  Ordered: a higher value is a better mode.
enum class Mode : uint8_t { kNone = 0, kCpu = 1, kCid = 2 };

// How the rseq IDs are formed (cid and cpu modes):
//   kRaw            the ID is the kernel's field (mm_cid or cpu_id).
//   kNodeQualified  node_id * cid_stride + mm_cid: cid mode on a multi-node
//                   machine.  A cid says nothing about the node, so per-ID
//                   data indexed by the raw cid would be shared by threads of
//                   different nodes over time; qualified IDs give each (node,
//                   cid) pair its own, and operations can insist on a node.
//                   Each (node, cid) ID is still held by one thread at a
//                   time, because the cid alone is.
// kNone in none mode (soft IDs only).
enum class IdKind : uint8_t { kNone = 0, kRaw = 1, kNodeQualified = 2 };

// How a raw-ID critical section bounds the ID it reads (Pop and Push):
//   kChecked    the ID must be below g_process.num_rseq_ids (any table of
//               NumIds() entries);
//   kWideTable  none: the ID's low 16 bits index a table of kWideTableIds
//               entries, null wherever no thread's ID can be (rseq.h,
//               PopUnchecked).
//   kWideMmCid  as kWideTable, with the ID read from mm_cid at its fixed
//               place in the area, addressed from the area offset that
//               arms the section: one load fewer (no ID-field offset).
//               Only in cid mode, where mm_cid is the ID field.
enum class IdBound : uint8_t { kChecked, kWideTable, kWideMmCid };

// Who registered the calling threads' rseq areas.
enum class Registration : uint8_t { kNone = 0, kGlibc = 1, kOwn = 2 };

// How the calling thread performs per-ID operations.
enum class ThreadPath : uint8_t {
  kUnknown = 0,  // not decided yet (a new thread); the slow path decides.
  kRseq = 1,     // rseq critical sections on its cpu or cid.
  kSoft = 2,     // a software ID guarded by a lock (no usable rseq).
};

// Soft IDs follow the rseq IDs: [soft_base, soft_base + kMaxSoftIds).
// Threads beyond this many share soft IDs, which their locks make safe.
inline constexpr uint32_t kMaxSoftIds = 1024;
// The most rseq IDs a process has (node-qualified IDs are turned off where
// nodes * possible cpus would exceed it; larger cpu counts are clamped).
inline constexpr uint32_t kMaxRseqIds = 8192;

struct alignas(64) ProcessState {
  // --- Written by Init() before init_state is released; then read-only. ---
  // %fs-relative offset of every thread's rseq area (constant across
  // threads: glibc's __rseq_offset, or our own initial-exec TLS area).
  intptr_t area_offset = 0;
  // area_offset + offset of the ID field (mm_cid in cid mode, else cpu_id).
  intptr_t id_offset = 0;
  // rseq IDs are in [0, num_rseq_ids); 0 in none mode.  Also the first
  // soft ID.
  uint32_t num_rseq_ids = 0;
  // Per-ID tables must hold this many entries.
  uint32_t num_ids = 0;
  Mode mode = Mode::kNone;
  // The fast paths' one-byte test: kRaw runs the inline raw-ID sections;
  // anything else takes the out-of-line path, which knows all three.
  IdKind id_kind = IdKind::kNone;
  // kNodeQualified: mm_cid < cid_stride and node_id < num_nodes, and
  // num_rseq_ids = num_nodes * cid_stride.  Both 0 otherwise.
  uint32_t cid_stride = 0;
  uint32_t num_nodes = 0;
  Mode best_mode = Mode::kNone;  // Before CIDMALLOC_RSEQ_MODE lowered it.
  Registration registration = Registration::kNone;
  bool has_node_id = false;  // The kernel fills node_id.
  bool fence_available = false;
  uint32_t feature_size = 0;   // getauxval(AT_RSEQ_FEATURE_SIZE), 0 if absent.
  uint32_t rseq_align = 0;     // getauxval(AT_RSEQ_ALIGN), 0 if absent.
  uint32_t possible_cpus = 0;  // From /sys/devices/system/cpu/possible.
  int registration_errno = 0;  // errno of our failed rseq(2), else 0.
  // 0: not started, 1: in progress, 2: done.  The release store of 2 in
  // InitSlow() pairs with the acquire loads in EnsureInit(), InitSlow(),
  // ThreadPathSlow() and os::InjectTopology().
  std::atomic<int> init_state{0};
};

extern ProcessState g_process CIDMALLOC_HIDDEN;
extern __thread ThreadPath t_path CIDMALLOC_TLS_IE CIDMALLOC_HIDDEN;

void InitSlow();
// Acquire: pairs with InitSlow()'s release store of 2, which publishes
// every field of g_process.
inline void EnsureInit() {
  if (CIDMALLOC_LIKELY(g_process.init_state.load(std::memory_order_acquire) ==
                       2)) {
    return;
  }
  InitSlow();
}

// rseq(2) on `area` (`flags` 0 registers it for the calling thread,
// CIDMALLOC_RSEQ_FLAG_UNREGISTER undoes that), with our signature: 0, or
// the errno it failed with.  errno is left as it was.
int RseqSyscall(void* area, uint32_t len, int flags);

// Decides (once per thread) how the calling thread performs per-ID
// operations, registering its own rseq area if that is our job.
ThreadPath ThreadPathSlow();
inline ThreadPath CurrentThreadPath() {
  const ThreadPath p = t_path;
  if (CIDMALLOC_LIKELY(p != ThreadPath::kUnknown)) return p;
  return ThreadPathSlow();
}

// A critical section that aborted this many times in a row (rseq/cs_ops.h)
// gives up: the operation then fails as on an empty or full stack, and its
// caller takes the slow path.  A few aborts in a row are rare (a
// preemption, migration or signal inside the section), 64 never happen,
// but a thread single-stepped by a debugger (ptrace) aborts at every step
// and would otherwise restart the same section for ever.
inline constexpr uint32_t kAbortsBeforeGivingUp = 64;

// The calling thread's soft ID, allocated on first use (absolute index).
uint32_t CurrentSoftId();

const char* ModeName(Mode m);
const char* RegistrationName(Registration r);

// Called with the thread's soft ID when a thread that used one exits, just
// before the ID is recycled.  Set at most once, before threads start.
void SetSoftIdExitCallback(void (*fn)(uint32_t id));

}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_STATE_H_
