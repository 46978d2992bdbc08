// rseq/registration.cc: process initialisation, feature detection, and the
// per-thread choice between rseq and soft IDs.
//
// Nothing here allocates: Init() runs from inside malloc in the allocator.
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rseq/area.h"
#include "rseq/raw_io.h"
#include "rseq/rseq.h"
#include "rseq/soft_ids.h"
#include "rseq/state.h"

// glibc 2.35+ exports where it registered each thread's area.  Weak, so that
// static links against older libcs, and musl, still resolve (to null).
extern "C" {
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace cidmalloc::rseq {

constinit ProcessState g_process;
__thread ThreadPath t_path CIDMALLOC_TLS_IE = ThreadPath::kUnknown;

namespace {

// Our own area, used when nobody registered one for the thread.  The kernel
// owns cpu_id_start, cpu_id, node_id and mm_cid once it is registered; the
// initial values only say "not registered": cpu_id is
// RSEQ_CPU_ID_UNINITIALIZED and node_id/mm_cid are out of every ID range,
// so a critical section run before registration fails its bounds check.
struct alignas(CIDMALLOC_RSEQ_AREA_SIZE) OwnArea {
  uint32_t cpu_id_start;
  int32_t cpu_id;
  uint64_t rseq_cs;
  uint32_t flags;
  uint32_t node_id;
  uint32_t mm_cid;
  uint32_t reserved;
};
static_assert(sizeof(OwnArea) == CIDMALLOC_RSEQ_AREA_SIZE);
static_assert(offsetof(OwnArea, cpu_id) == CIDMALLOC_RSEQ_OFF_CPU_ID);
static_assert(offsetof(OwnArea, rseq_cs) == CIDMALLOC_RSEQ_OFF_RSEQ_CS);
static_assert(offsetof(OwnArea, flags) == CIDMALLOC_RSEQ_OFF_FLAGS);
static_assert(offsetof(OwnArea, node_id) == CIDMALLOC_RSEQ_OFF_NODE_ID);
static_assert(offsetof(OwnArea, mm_cid) == CIDMALLOC_RSEQ_OFF_MM_CID);

__thread OwnArea t_own_area CIDMALLOC_TLS_IE = {
    0, CIDMALLOC_RSEQ_CPU_ID_UNINITIALIZED, 0, 0, ~0u, ~0u, 0};

// Set while this thread runs Init(), to detect re-entry.
__thread bool t_in_init CIDMALLOC_TLS_IE = false;

// Registers t_own_area for the calling thread.  Returns 0 or an errno.
//
// A registration the kernel made has set cpu_id by the time the call
// returns (the area is updated on the way back to user space).  One that
// leaves cpu_id untouched was never made: a seccomp filter answered the
// call with 0 (SECCOMP_RET_ERRNO with no errno) without running it.  That
// counts as ENOSYS, so the thread takes soft IDs, and the mode and the
// statistics do not claim an rseq mode that nothing backs.
int RegisterOwnArea() {
  int err = RseqSyscall(&t_own_area, CIDMALLOC_RSEQ_AREA_SIZE, 0);
  // Volatile: the kernel, not this thread, wrote the field (it is only read).
  if (err == 0 && *static_cast<volatile int32_t*>(&t_own_area.cpu_id) < 0) {
    err = ENOSYS;
  }
  return err;
}

void Warn(const char* what, const char* value, const char* outcome) {
  RawBuffer b;
  b.Str("cidmalloc: ").Str(what).Str(value).Str(outcome).Ch('\n');
  b.WriteTo(2);
}

// CIDMALLOC_RSEQ_MODE=cid|cpu|none caps the mode; unset means no cap.
Mode ModeCap() {
  const char* v = GetKnob("CIDMALLOC_RSEQ_MODE");
  if (v == nullptr || *v == '\0') return Mode::kCid;
  if (strcmp(v, "cid") == 0) return Mode::kCid;
  if (strcmp(v, "cpu") == 0) return Mode::kCpu;
  if (strcmp(v, "none") == 0) return Mode::kNone;
  Warn("CIDMALLOC_RSEQ_MODE=", v,
       " is not one of cid|cpu|none; using the best mode available");
  return Mode::kCid;
}

// CIDMALLOC_RSEQ_SOFT=owner|lock: lock turns the soft IDs' owner protocol
// off (the lock protocol's tests, and a way out should the protocol
// misbehave).  Unset or empty means owner.
SoftProtocol SoftKnob() {
  const char* v = GetKnob("CIDMALLOC_RSEQ_SOFT");
  if (v == nullptr || *v == '\0' || strcmp(v, "owner") == 0) {
    return SoftProtocol::kOwner;
  }
  if (strcmp(v, "lock") == 0) return SoftProtocol::kLock;
  Warn("CIDMALLOC_RSEQ_SOFT=", v, " is not one of owner|lock; using owner");
  return SoftProtocol::kOwner;
}

void CountCpu(int cpu, void* arg) {
  uint32_t* max = static_cast<uint32_t*>(arg);
  if (static_cast<uint32_t>(cpu) + 1 > *max) *max = cpu + 1;
}

// One more than the highest number in a sysfs list file ("0-3,8"), or
// `fallback` if it cannot be read.
uint32_t ListFileCount(const char* path, uint32_t fallback) {
  char buf[256];
  uint32_t n = 0;
  if (ReadSmallFile(path, buf, sizeof buf) > 0 &&
      ForEachInCpuList(buf, CountCpu, &n) && n > 0) {
    return n;
  }
  return fallback;
}

// Number of possible CPU numbers: every cpu and cid is below it.  If the
// file cannot be read, kMaxRseqIds (8192, x86-64 Linux's largest NR_CPUS):
// still a bound on every cpu number, which the allocator's wide sections
// rely on (RawIdsBelowNumRseqIds()).
uint32_t ReadPossibleCpus() {
  return ListFileCount("/sys/devices/system/cpu/possible", kMaxRseqIds);
}

// Number of possible node numbers: every node_id is below it (1 without
// NUMA support in the kernel).
uint32_t ReadPossibleNodes() {
  return ListFileCount("/sys/devices/system/node/possible", 1);
}

// CIDMALLOC_RSEQ_NODE_IDS=auto|on|off: node-qualified IDs in cid mode.
// auto (the default) uses them where the machine has several nodes; on
// forces them even with one node (tests of the qualified sections).
enum class NodeIds { kAuto, kOn, kOff };
NodeIds NodeIdsKnob() {
  const char* v = GetKnob("CIDMALLOC_RSEQ_NODE_IDS");
  if (v == nullptr || *v == '\0' || strcmp(v, "auto") == 0) return NodeIds::kAuto;
  if (strcmp(v, "on") == 0) return NodeIds::kOn;
  if (strcmp(v, "off") == 0) return NodeIds::kOff;
  Warn("CIDMALLOC_RSEQ_NODE_IDS=", v, " is not one of auto|on|off; using auto");
  return NodeIds::kAuto;
}

// Sets the ID kind and range of a process in cid or cpu mode.
void ChooseIds(ProcessState& p) {
  const uint32_t cpus = p.possible_cpus < kMaxRseqIds ? p.possible_cpus
                                                      : kMaxRseqIds;
  p.id_kind = IdKind::kRaw;
  p.num_rseq_ids = cpus;
  if (p.mode != Mode::kCid || !p.has_node_id) return;
  const NodeIds knob = NodeIdsKnob();
  const uint32_t nodes = ReadPossibleNodes();
  if (knob == NodeIds::kOff || (knob == NodeIds::kAuto && nodes < 2)) return;
  if (uint64_t{nodes} * cpus > kMaxRseqIds) return;  // Table too small.
  p.id_kind = IdKind::kNodeQualified;
  p.cid_stride = cpus;
  p.num_nodes = nodes;
  p.num_rseq_ids = nodes * cpus;
}

bool RegisterMembarrier() {
  const int saved = errno;
  const long r =
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
              0, 0);
  errno = saved;
  return r == 0;
}

void AtForkPrepare() { LockSoftIdsForFork(); }
void AtForkParent() { UnlockSoftIdsAfterFork(); }

void AtForkChild() {
  // The child has one thread and a new mm: membarrier registration is per
  // mm, and the other threads' soft IDs and locks died with them.
  if (g_process.mode != Mode::kNone) {
    g_process.fence_available = RegisterMembarrier();
  }
  ResetSoftIdsInChild();
}

void DoInit() {
  ProcessState& p = g_process;
  // A consistent none-mode state first, in case anything below re-enters.
  p.mode = p.best_mode = Mode::kNone;
  p.registration = Registration::kNone;
  p.id_kind = IdKind::kNone;
  p.cid_stride = p.num_nodes = 0;
  p.num_rseq_ids = 0;
  p.num_ids = kMaxSoftIds;
  p.possible_cpus = ReadPossibleCpus();

  const int saved = errno;
  p.feature_size =
      static_cast<uint32_t>(getauxval(CIDMALLOC_AT_RSEQ_FEATURE_SIZE));
  p.rseq_align = static_cast<uint32_t>(getauxval(CIDMALLOC_AT_RSEQ_ALIGN));
  errno = saved;

  const Mode cap = ModeCap();
#if CIDMALLOC_RSEQ_SECTIONS
  if (&__rseq_size != nullptr && __rseq_size > 0) {
    // glibc registered every thread.  __rseq_size reports 20 on glibc 2.36
    // even though the registered area is 32 bytes long, so features come
    // from auxv, not from __rseq_size.
    p.area_offset = __rseq_offset;
    p.registration = Registration::kGlibc;
    if (LoadTp32(p.area_offset + CIDMALLOC_RSEQ_OFF_CPU_ID) < 0) {
      p.registration = Registration::kNone;  // glibc's attempt failed.
    }
  } else if (cap != Mode::kNone) {
    p.area_offset = reinterpret_cast<char*>(&t_own_area) - ThreadPointer();
    p.registration_errno = RegisterOwnArea();
    if (p.registration_errno == 0) p.registration = Registration::kOwn;
  }
#endif
  if (p.registration != Registration::kNone) {
    p.best_mode = p.feature_size >= CIDMALLOC_RSEQ_FEATURE_MM_CID ? Mode::kCid
                                                                  : Mode::kCpu;
    p.has_node_id = p.feature_size >= CIDMALLOC_RSEQ_FEATURE_NODE_ID;
  }
  p.mode = cap < p.best_mode ? cap : p.best_mode;
  const char* knob = GetKnob("CIDMALLOC_RSEQ_MODE");
  // Only an explicit, valid request the machine cannot honour (an empty or
  // invalid value means no cap, and was warned about above).
  if (cap > p.best_mode && knob != nullptr &&
      (strcmp(knob, "cid") == 0 || strcmp(knob, "cpu") == 0)) {
    Warn("CIDMALLOC_RSEQ_MODE=", knob,
         " is not available here; using the best mode available");
  }
  p.id_offset = p.area_offset + (p.mode == Mode::kCid
                                     ? CIDMALLOC_RSEQ_OFF_MM_CID
                                     : CIDMALLOC_RSEQ_OFF_CPU_ID);
  if (p.mode != Mode::kNone) {
    p.fence_available = RegisterMembarrier();
    ChooseIds(p);
    p.num_ids = p.num_rseq_ids + kMaxSoftIds;
  }
  // The soft knob matters in none mode only (rseq modes use the lock
  // protocol for their rare soft IDs), so it is read only there.
  InitSoftIds(p.mode == Mode::kNone ? SoftKnob() : SoftProtocol::kLock);
  RegisterForkHandlers();
}

// Set by the first RegisterForkHandlers().
constinit std::atomic<bool> g_fork_handlers{false};

}  // namespace

int RseqSyscall(void* area, uint32_t len, int flags) {
  const int saved = errno;
  const long r = syscall(SYS_rseq, area, len, flags, CIDMALLOC_RSEQ_SIG);
  const int err = r == 0 ? 0 : errno;
  errno = saved;
  return err;
}

void RegisterForkHandlers() {
  // Relaxed: only which caller registers matters, not what it saw.
  if (g_fork_handlers.exchange(true, std::memory_order_relaxed)) return;
  pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
}

void InitSlow() {
  if (t_in_init) return;  // Re-entered: the none-mode state is consistent.
  int expected = 0;
  // Acquire matters only when the CAS fails on 2 (it then pairs with the
  // release store below); 0 is only the initial value, so a winner has
  // nothing to acquire.
  if (!g_process.init_state.compare_exchange_strong(
          expected, 1, std::memory_order_acquire)) {
    // Another thread initialises; its release store below pairs with this
    // acquire load.
    while (g_process.init_state.load(std::memory_order_acquire) != 2) {
      syscall(SYS_sched_yield);
    }
    return;
  }
  t_in_init = true;
  DoInit();
  t_in_init = false;
  // Publishes every field of g_process; pairs with the acquire loads in
  // EnsureInit() and above.
  g_process.init_state.store(2, std::memory_order_release);
}

ThreadPath ThreadPathSlow() {
  EnsureInit();
  // Acquire: pairs with InitSlow()'s release store of 2.
  if (g_process.init_state.load(std::memory_order_acquire) != 2) {
    return ThreadPath::kSoft;  // Re-entered during Init(); do not cache.
  }
  ThreadPath path = ThreadPath::kSoft;
  if (g_process.mode != Mode::kNone) {
    if (g_process.registration == Registration::kGlibc) {
      if (AreaCpuId() >= 0) path = ThreadPath::kRseq;
    } else if (g_process.registration == Registration::kOwn) {
      // The second look: a signal handler that allocated between the first
      // and the system call registered the area itself, and the call then
      // failed with EBUSY.
      if (AreaCpuId() >= 0 || RegisterOwnArea() == 0 || AreaCpuId() >= 0) {
        path = ThreadPath::kRseq;
      }
    }
  }
  t_path = path;
  return path;
}

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kCid:
      return "cid";
    case Mode::kCpu:
      return "cpu";
    case Mode::kNone:
      break;
  }
  return "none";
}

const char* RegistrationName(Registration r) {
  switch (r) {
    case Registration::kGlibc:
      return "glibc";
    case Registration::kOwn:
      return "own";
    case Registration::kNone:
      break;
  }
  return "none";
}

}  // namespace cidmalloc::rseq
