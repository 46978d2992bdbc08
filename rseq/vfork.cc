// rseq/vfork.cc: lending the calling thread's rseq area to a vfork child.
//
// The problem.  A vfork child runs on its parent thread's stack and TLS,
// so it reads the parent thread's rseq area, but the kernel gives a
// CLONE_VM child no registration of its own (it copies one only into a
// child with a memory of its own).  A child that allocated therefore read
// the parent's cid or cpu from the area and ran its critical sections on
// them unprotected, while another thread of the process could hold that
// ID (the suspended parent's cid is free for the scheduler to hand out),
// and two writers tore a slab's stacks: objects lost or handed out twice
// (tests/allocator_stress/vfork_test.cc).  POSIX allows a vfork child
// nothing but exec and _exit, but children that call setenv, strdup or
// opendir before exec are common.
//
// The hand-over.  At most one task has the area registered at any time,
// and no field the kernel owns is ever written while it is registered:
//   prepare  (parent)  every signal blocked (a handler that allocated in
//                      the steps below would use an unregistered area);
//                      the thread's registration, if any, undone
//                      (RSEQ_FLAG_UNREGISTER: the kernel resets the IDs);
//   child              registers the area for itself: the kernel writes
//                      the child's own cid and cpu there and restarts its
//                      sections.  If it cannot, the IDs are set out of
//                      range (the area is nobody's) and the child takes
//                      soft IDs;
//   parent             resumes only once the child has exec'd or exited,
//                      which ends the child's registration; it puts the
//                      IDs back to what an unregistration leaves and
//                      registers the area again, so the kernel writes its
//                      own IDs.
// The thread's signal mask is restored in both.  A registration this
// thread cannot undo (glibc registered a length we cannot find) leaves
// the child as it was before: documented in docs/rseq.md.
//
// The state lives in the thread's TLS, which the child shares: the child
// reads it and writes only t_path, which the parent then sets again.
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rseq/area.h"
#include "rseq/rseq.h"
#include "rseq/state.h"

// glibc 2.35+ (see registration.cc).
extern "C" {
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace cidmalloc::rseq {

namespace {

enum class VforkPlan : uint8_t {
  kNone,   // No rseq area in use: the child shares the thread's soft ID,
           // which the suspended thread cannot use meanwhile.
  kLend,   // The thread's registration was undone: the child registers
           // the area, then the thread again.
  kFree,   // Our own area, not registered (not yet, or it failed): the
           // child registers it; afterwards it is nobody's again.
  kAsIs,   // The thread's registration could not be undone.
};

// Zero-initialised (a __thread variable takes no constructor); every field
// is set by VforkPrepare() before it is read.
struct VforkState {
  uint64_t mask;    // The thread's signal mask before (the kernel's).
  uint32_t len;     // The length the area is registered with.
  ThreadPath path;  // t_path before.
  VforkPlan plan;
};

__thread VforkState t_vfork CIDMALLOC_TLS_IE;

// rt_sigprocmask(2) on the kernel's 64-bit mask: glibc's sigprocmask would
// leave its two internal signals unblocked, and its sigset_t would take
// 128 bytes of every thread's static TLS here.  Blocking those two only
// delays a pthread_cancel or setuid aimed at this thread until the child
// has exec'd or exited, when the thread could not act on them anyway.
void SetSignalMask(const uint64_t* set, uint64_t* old) {
  const int saved = errno;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, set, old, sizeof(uint64_t));
  errno = saved;
}

// rseq(2) on the calling thread's area: 0 or an errno (errno untouched).
int RseqCall(uint32_t len, int flags) {
  return RseqSyscall(ThreadPointer() + g_process.area_offset, len, flags);
}

// Stores into the area's ID fields; only while no task has it registered.
void SetIds(int32_t cpu_id, uint32_t node_id, uint32_t mm_cid) {
  char* area = ThreadPointer() + g_process.area_offset;
  auto store = [area](int offset, uint32_t v) {
    *reinterpret_cast<volatile uint32_t*>(area + offset) = v;
  };
  store(CIDMALLOC_RSEQ_OFF_CPU_ID_START, 0);
  store(CIDMALLOC_RSEQ_OFF_CPU_ID, static_cast<uint32_t>(cpu_id));
  store(CIDMALLOC_RSEQ_OFF_NODE_ID, node_id);
  store(CIDMALLOC_RSEQ_OFF_MM_CID, mm_cid);
}

// What RSEQ_FLAG_UNREGISTER leaves, and what a registration starts from.
void SetIdsAsUnregistered() {
  SetIds(CIDMALLOC_RSEQ_CPU_ID_UNINITIALIZED, 0, 0);
}

// Out of every ID range: the inline sections fail their bounds or table
// check and the slow paths see an unregistered thread.
void SetIdsOutOfRange() {
  SetIds(CIDMALLOC_RSEQ_CPU_ID_UNINITIALIZED, ~0u, ~0u);
}

// Registers the area (which no task has registered) for the calling task,
// on its rseq IDs; if it cannot, leaves the IDs out of range, on soft IDs.
void RegisterOrTakeSoftIds(uint32_t len) {
  if (RseqCall(len, 0) == 0) {
    t_path = ThreadPath::kRseq;
  } else {
    SetIdsOutOfRange();
    t_path = ThreadPath::kSoft;
  }
}

// Undoes the thread's registration: its length, or 0 if no length we
// know of works.  glibc 2.35-2.39 register 32 bytes; later versions may
// register __rseq_size, rounded up to 32.
uint32_t Unregister() {
  uint32_t lens[3] = {CIDMALLOC_RSEQ_AREA_SIZE, 0, 0};
  if (g_process.registration == Registration::kGlibc &&
      &__rseq_size != nullptr && __rseq_size > CIDMALLOC_RSEQ_AREA_SIZE) {
    lens[1] = __rseq_size;
    lens[2] = (__rseq_size + 31) & ~31u;
  }
  for (const uint32_t len : lens) {
    if (len != 0 && RseqCall(len, CIDMALLOC_RSEQ_FLAG_UNREGISTER) == 0) {
      return len;
    }
  }
  return 0;
}

}  // namespace

void VforkPrepare() {
  VforkState& s = t_vfork;
  const uint64_t all = ~uint64_t{0};  // The kernel ignores SIGKILL, SIGSTOP.
  SetSignalMask(&all, &s.mask);
  s.path = t_path;
  s.len = CIDMALLOC_RSEQ_AREA_SIZE;
  EnsureInit();
  if (!cs::kHaveSections || g_process.mode == Mode::kNone ||
      g_process.registration == Registration::kNone) {
    s.plan = VforkPlan::kNone;
  } else if (AreaCpuId() < 0) {
    s.plan = VforkPlan::kFree;
  } else {
    s.len = Unregister();
    s.plan = s.len != 0 ? VforkPlan::kLend : VforkPlan::kAsIs;
  }
}

void VforkChild() {
  VforkState& s = t_vfork;
  if (s.plan == VforkPlan::kLend || s.plan == VforkPlan::kFree) {
    RegisterOrTakeSoftIds(s.len);
  }
  SetSignalMask(&s.mask, nullptr);
}

void VforkParent() {
  VforkState& s = t_vfork;
  if (s.plan == VforkPlan::kLend) {
    SetIdsAsUnregistered();
    RegisterOrTakeSoftIds(s.len);
  } else if (s.plan == VforkPlan::kFree) {
    // The child may have registered it: back to never registered, and to
    // the thread's own decision.
    SetIdsOutOfRange();
    t_path = s.path;
  }
  SetSignalMask(&s.mask, nullptr);
}

}  // namespace cidmalloc::rseq
