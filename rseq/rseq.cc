// rseq/rseq.cc: the out-of-line slow paths of rseq.h.
//
// Each slow path first settles how the calling thread works (registering its
// own area if needed), retries the critical section on the rseq path, and
// otherwise runs the portable version under a soft-ID lock.
#include "rseq/rseq.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rseq/inject.h"
#include "rseq/raw_io.h"
#include "rseq/soft_ids.h"

#ifdef CIDMALLOC_RSEQ_INJECT
extern "C" {
volatile uint32_t cidmalloc_rseq_inject_loops[CIDMALLOC_RSEQ_INJECT_POINTS];
}
#endif

namespace cidmalloc::rseq {

namespace {

// The calling thread's rseq ID, or ~0u if it has none in range.  Outside a
// critical section only a hint: the thread may move right after.
uint32_t LoadRseqId() {
  const ProcessState& p = g_process;
  if (p.id_kind == IdKind::kNodeQualified) {
    const uint32_t node = static_cast<uint32_t>(
        LoadTp32OrNegative(p.area_offset + CIDMALLOC_RSEQ_OFF_NODE_ID));
    const uint32_t cid = static_cast<uint32_t>(
        LoadTp32OrNegative(p.area_offset + CIDMALLOC_RSEQ_OFF_MM_CID));
    if (node >= p.num_nodes || cid >= p.cid_stride) return ~0u;
    return node * p.cid_stride + cid;
  }
  const uint32_t id = static_cast<uint32_t>(LoadTp32OrNegative(p.id_offset));
  return id < p.num_rseq_ids ? id : ~0u;
}

// True if the calling thread's rseq ID is in range, i.e. a failed critical
// section failed on the data (or, node-qualified, on the node), not on the
// ID.
bool RseqIdInRange() { return LoadRseqId() != ~0u; }

// The critical section of the process's ID kind (raw or node-qualified).
bool IsQualified() { return g_process.id_kind == IdKind::kNodeQualified; }
// The node a node-qualified push insists on.
int32_t PushNode(int node) { return node >= 0 ? node : CurrentNode(); }

// The thread's path for a per-ID operation, demoting it to soft IDs if its
// rseq ID is unusable (out of range: never seen, but never trusted).
ThreadPath OperationPath() {
  ThreadPath path = CurrentThreadPath();
  if (path == ThreadPath::kRseq && !RseqIdInRange()) {
    t_path = path = ThreadPath::kSoft;
  }
  return path;
}

}  // namespace

uint32_t CurrentId() {
  if (OperationPath() == ThreadPath::kRseq) return LoadRseqId();
  return CurrentSoftId();
}

int NodeOfId(uint32_t id) {
  EnsureInit();
  const ProcessState& p = g_process;
  if (id >= p.num_rseq_ids) return -1;
  if (p.id_kind == IdKind::kNodeQualified) {
    return static_cast<int>(id / p.cid_stride);
  }
  if (p.mode == Mode::kCpu) return NodeOfCpu(static_cast<int>(id));
  return -1;
}

int CurrentCid() {
  EnsureInit();
  if (g_process.feature_size < CIDMALLOC_RSEQ_FEATURE_MM_CID) return -1;
  if (AreaCpuId() < 0) ThreadPathSlow();  // Registers an own area if needed.
  if (AreaCpuId() < 0) return -1;
  return AreaField(CIDMALLOC_RSEQ_OFF_MM_CID);
}

int CurrentCpuSlow() {
  EnsureInit();
  if (g_process.registration == Registration::kOwn && t_path ==
      ThreadPath::kUnknown) {
    ThreadPathSlow();
    const int32_t cpu = AreaCpuId();
    if (cpu >= 0) return cpu;
  }
  unsigned cpu = 0;
  // glibc's getcpu() uses the vDSO on x86-64.
  if (getcpu(&cpu, nullptr) != 0) return 0;
  return static_cast<int>(cpu);
}

int GetCpuSlow(unsigned* cpu, unsigned* node) {
  EnsureInit();
  if (g_process.registration != Registration::kNone) {
    if (t_path == ThreadPath::kUnknown) ThreadPathSlow();
    if (cs::kHaveSections && g_process.has_node_id) {
      int32_t c, n;
      cs::CpuNode(&c, &n);
      if (c >= 0) {
        *cpu = static_cast<unsigned>(c);
        *node = static_cast<unsigned>(n);
        return 0;
      }
    }
    const int32_t c = AreaCpuId();
    if (c >= 0) {
      // No node_id (Linux < 6.3): the node of a cpu never changes, so the
      // pair is consistent whenever the cpu read is.
      *cpu = static_cast<unsigned>(c);
      *node = static_cast<unsigned>(NodeOfCpu(c));
      return 0;
    }
  }
  return getcpu(cpu, node);
}

void CounterAddSlow(uintptr_t base, int64_t delta) {
  EnsureInit();
  // A failure (an ID out of range, or a section that gave up after its
  // aborts) adds to the thread's soft ID's counter instead: the sums add
  // every ID's.
  if (cs::kHaveSections && OperationPath() == ThreadPath::kRseq) {
    if (IsQualified() ? cs::CounterAdd<IdKind::kNodeQualified>(base, delta)
                      : cs::CounterAdd(base, delta)) {
      return;
    }
  }
  const SoftHold hold = SoftEnter();
  const uint32_t index = hold.index;
  CIDMALLOC_RSEQ_INJECT_C(0);
  int64_t* counter = reinterpret_cast<int64_t*>(
      base + (uintptr_t{g_process.num_rseq_ids + index}
              << CIDMALLOC_COUNTER_STRIDE_SHIFT));
  // One writer (the ID's holder); relaxed atomic accesses because readers
  // (the statistics' sums) load the counter without holding the ID.
  __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + delta,
                   __ATOMIC_RELAXED);
  SoftExit(hold);
}

void* PopSlow(void* const* table, uintptr_t offset) {
  EnsureInit();
  if (cs::kHaveSections && OperationPath() == ThreadPath::kRseq) {
    void* item;
    if (IsQualified() ? cs::Pop<IdKind::kNodeQualified>(table, offset, &item)
                      : cs::Pop(table, offset, &item)) {
      return item;
    }
    if (RseqIdInRange()) return nullptr;
    t_path = ThreadPath::kSoft;
  }
  const SoftHold hold = SoftEnter();
  const uint32_t index = hold.index;
  void* item = nullptr;
  Stack* s = SoftStack(table, offset, index);
  CIDMALLOC_RSEQ_INJECT_C(0);
  SoftStackPop(s, &item);  // Leaves item null when it fails.
  SoftExit(hold);
  return item;
}

bool PushSlow(void* const* table, uintptr_t offset, void* item, int node) {
  EnsureInit();
  if (cs::kHaveSections && OperationPath() == ThreadPath::kRseq) {
    if (IsQualified() ? cs::Push<IdKind::kNodeQualified>(table, offset, item,
                                                         PushNode(node))
                      : cs::Push(table, offset, item)) {
      return true;
    }
    if (RseqIdInRange()) return false;
    t_path = ThreadPath::kSoft;
  }
  const SoftHold hold = SoftEnter();
  const uint32_t index = hold.index;
  Stack* s = SoftStack(table, offset, index);
  CIDMALLOC_RSEQ_INJECT_C(0);
  const bool ok = SoftStackPush(s, item);
  SoftExit(hold);
  return ok;
}

uint32_t PopBatchSlow(void* const* table, uintptr_t offset, void** out,
                      uint32_t want) {
  EnsureInit();
  if (cs::kHaveSections && OperationPath() == ThreadPath::kRseq) {
    const uint32_t n =
        IsQualified()
            ? cs::PopBatch<IdKind::kNodeQualified>(table, offset, out, want)
            : cs::PopBatch(table, offset, out, want);
    if (n != 0 || RseqIdInRange()) return n;
    t_path = ThreadPath::kSoft;
  }
  const SoftHold hold = SoftEnter();
  const uint32_t index = hold.index;
  uint32_t n = 0;
  Stack* s = SoftStack(table, offset, index);
  CIDMALLOC_RSEQ_INJECT_C(0);
  if (s != nullptr) {
    n = s->PopHeldUpTo(out, want);
  }
  SoftExit(hold);
  return n;
}

uint32_t PushBatchSlow(void* const* table, uintptr_t offset, void* const* in,
                       uint32_t want, int node) {
  EnsureInit();
  if (cs::kHaveSections && OperationPath() == ThreadPath::kRseq) {
    const uint32_t n =
        IsQualified() ? cs::PushBatch<IdKind::kNodeQualified>(
                            table, offset, in, want, PushNode(node))
                      : cs::PushBatch(table, offset, in, want);
    if (n != 0 || RseqIdInRange()) return n;
    t_path = ThreadPath::kSoft;
  }
  const SoftHold hold = SoftEnter();
  const uint32_t index = hold.index;
  uint32_t n = 0;
  Stack* s = SoftStack(table, offset, index);
  CIDMALLOC_RSEQ_INJECT_C(0);
  if (s != nullptr) {
    while (n < want && s->PushHeld(in[n])) ++n;
  }
  SoftExit(hold);
  return n;
}

int64_t AdjustCapacity(void* const* table, uintptr_t offset, int32_t delta,
                       uint32_t limit) {
  EnsureInit();
  if (limit > Stack::kMaxCapacity) limit = Stack::kMaxCapacity;
  if (cs::kHaveSections && OperationPath() == ThreadPath::kRseq) {
    const int64_t c =
        IsQualified() ? cs::AdjustCapacity<IdKind::kNodeQualified>(
                            table, offset, delta, limit)
                      : cs::AdjustCapacity(table, offset, delta, limit);
    if (c >= 0 || RseqIdInRange()) return c;
    t_path = ThreadPath::kSoft;
  }
  const SoftHold hold = SoftEnter();
  const uint32_t index = hold.index;
  int64_t c = -1;
  Stack* s = SoftStack(table, offset, index);
  if (s != nullptr) {
    c = static_cast<int64_t>(s->capacity) + delta;
    if (c < 0) c = 0;
    if (c > limit) c = limit;
    s->capacity = static_cast<uint16_t>(c);
  }
  SoftExit(hold);
  return c;
}

bool Fence() {
  EnsureInit();
  if (!g_process.fence_available) return false;
  const int saved = errno;
  const long r =
      syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0);
  errno = saved;
  return r == 0;
}

namespace {

enum class LockWaits : uint8_t { kWait, kTry };

bool Quiesce(uint32_t id, LockWaits waits) {
  EnsureInit();
  if (id >= g_process.num_rseq_ids) {
    const uint32_t index = id - g_process.num_rseq_ids;
    const bool locked = waits == LockWaits::kWait
                            ? SoftLockExclusive(index)
                            : SoftTryLockExclusive(index);
    if (!locked) return false;
    SoftUnlock(index);
    return true;
  }
  return Fence();
}

}  // namespace

bool QuiesceId(uint32_t id) { return Quiesce(id, LockWaits::kWait); }
bool TryQuiesceId(uint32_t id) { return Quiesce(id, LockWaits::kTry); }

void IdChangedInCriticalSection() {
  static const char kMsg[] =
      "cidmalloc: rseq ID changed inside a critical section that was not "
      "restarted (compare-twice check)\n";
  RawWrite(2, kMsg, sizeof kMsg - 1);
  abort();
}

}  // namespace cidmalloc::rseq
