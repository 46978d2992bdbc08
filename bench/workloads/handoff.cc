// handoff: synchronous request/reply hand-offs between two threads, each
// allocating on one side and freeing on the other (bench/workloads/
// README.md).  Only one of the two threads runs at a time.
//
//   --mode=migrate  thread A allocates a request (random size, filled with
//                   a pattern) and wakes B through a futex; B checks it,
//                   allocates a reply, frees the request and wakes A; A
//                   checks and frees the reply.  The scheduler places the
//                   threads (on this 2-cpu machine: usually on two cpus).
//   --mode=pinned   the same, both threads pinned to one cpu (the first in
//                   the process's allowed set).
//   --mode=seccomp  a seccomp user-notification supervisor, the pattern of
//                   the kernel's SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP mode
//                   (seed 003): the target thread installs a filter that
//                   sends getppid() to a listener, allocates a request
//                   before each call and passes it in the arguments; the
//                   supervisor thread receives the notification, checks
//                   the request, allocates and frees a scratch buffer,
//                   allocates a reply and returns its address as the
//                   result; the target checks and frees the reply and its
//                   request.  Exit 77 ("skip: ...") if the kernel refuses.
//
//   --quick   1/20 of the round trips
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "bench/workloads/common.h"

// Linux 6.6 (the synchronous mode); Debian 12's headers are older.
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

namespace {

using wl::Fail;

constexpr uint64_t kReplyKey = 0x7265706c79ULL;  // "reply"

// Request sizes: log-uniform in [16, 4096].  Reply sizes are a function of
// the request's cookie, so both sides know them.
size_t RequestSize(wl::Rng& rng) { return rng.LogRange(16, 4096); }
size_t ReplySize(uint64_t cookie) {
  return 16 + wl::Mix64(cookie ^ kReplyKey) % 2033;  // [16, 2048]
}

void* AllocOrFail(size_t size) {
  void* p = malloc(size);
  if (p == nullptr) Fail("malloc(%zu) returned NULL", size);
  return p;
}

// ---- futex ping-pong (migrate, pinned) -------------------------------------

void FutexWait(uint32_t* word, uint32_t val) {
  long r = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, nullptr,
                   nullptr, 0);
  if (r != 0 && errno != EAGAIN && errno != EINTR) {
    Fail("FUTEX_WAIT: %s", strerror(errno));
  }
}

void FutexWake(uint32_t* word) {
  if (syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0) <
      0) {
    Fail("FUTEX_WAKE: %s", strerror(errno));
  }
}

struct PingPong {
  alignas(64) uint32_t turn = 0;  // the futex word: whose turn, kA or kB
  alignas(64) void* request = nullptr;  // nullptr: stop
  size_t request_size = 0;
  uint64_t cookie = 0;
  void* reply = nullptr;

  static constexpr uint32_t kA = 0;
  static constexpr uint32_t kB = 1;

  void Pass(uint32_t to) {
    __atomic_store_n(&turn, to, __ATOMIC_RELEASE);
    FutexWake(&turn);
  }
  void WaitFor(uint32_t me) {
    uint32_t t;
    while ((t = __atomic_load_n(&turn, __ATOMIC_ACQUIRE)) != me) {
      FutexWait(&turn, t);
    }
  }
};

struct SideResult {
  uint64_t rounds = 0;
  uint64_t sum = 0;  // sum of the cookies seen
};

void RunA(PingPong& pp, uint64_t rounds, int cpu, SideResult* out) {
  if (cpu >= 0 && !wl::PinCallingThread(cpu)) {
    Fail("thread A: sched_setaffinity(cpu %d): %s", cpu, strerror(errno));
  }
  wl::Rng rng(3000);
  SideResult r;
  for (uint64_t i = 0; i < rounds; ++i) {
    size_t size = RequestSize(rng);
    uint64_t cookie = rng.Next();
    void* req = AllocOrFail(size);
    wl::FillPattern(req, size, cookie);
    pp.request = req;
    pp.request_size = size;
    pp.cookie = cookie;
    pp.Pass(PingPong::kB);
    pp.WaitFor(PingPong::kA);
    void* reply = pp.reply;
    if (reply == nullptr) Fail("round %llu: no reply",
                               static_cast<unsigned long long>(i));
    if (!wl::CheckPattern(reply, ReplySize(cookie), cookie ^ kReplyKey)) {
      Fail("round %llu: reply %p (%zu bytes) corrupt",
           static_cast<unsigned long long>(i), reply, ReplySize(cookie));
    }
    free(reply);
    r.rounds++;
    r.sum += cookie;
  }
  pp.request = nullptr;
  pp.Pass(PingPong::kB);
  *out = r;
}

void RunB(PingPong& pp, int cpu, SideResult* out) {
  if (cpu >= 0 && !wl::PinCallingThread(cpu)) {
    Fail("thread B: sched_setaffinity(cpu %d): %s", cpu, strerror(errno));
  }
  SideResult r;
  for (;;) {
    pp.WaitFor(PingPong::kB);
    void* req = pp.request;
    if (req == nullptr) break;
    uint64_t cookie = pp.cookie;
    if (!wl::CheckPattern(req, pp.request_size, cookie)) {
      Fail("round %llu: request %p (%zu bytes) corrupt",
           static_cast<unsigned long long>(r.rounds), req, pp.request_size);
    }
    size_t rsize = ReplySize(cookie);
    void* reply = AllocOrFail(rsize);
    wl::FillPattern(reply, rsize, cookie ^ kReplyKey);
    free(req);
    pp.reply = reply;
    r.rounds++;
    r.sum += cookie;
    pp.Pass(PingPong::kA);
  }
  *out = r;
}

// ---- seccomp user notification ---------------------------------------------

constexpr uint64_t kMagic = 0x6369646d616c6cULL;  // args[5] of our calls

// Hands the listener fd (or a skip reason) from the target thread to the
// supervisor and main threads.
struct Setup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int fd = -1;
  pid_t target_tid = 0;
  std::string skip;  // non-empty: the kernel refused

  void Publish(int f, pid_t tid, std::string why) {
    std::lock_guard<std::mutex> lock(mu);
    fd = f;
    target_tid = tid;
    skip = std::move(why);
    done = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
  }
};

std::string Refused(const char* what, int err) {
  return std::string(what) + ": " + strerror(err);
}

// Installs the filter on the calling thread; returns the listener fd, or -1
// with *why set.
int InstallFilter(std::string* why) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    *why = Refused("prctl(PR_SET_NO_NEW_PRIVS)", errno);
    return -1;
  }
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getppid, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {
      static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
  long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                    SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  if (fd < 0) {
    *why = Refused("seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)", errno);
    return -1;
  }
  if (ioctl(static_cast<int>(fd), SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) != 0) {
    *why = Refused("SECCOMP_IOCTL_NOTIF_SET_FLAGS(SYNC_WAKE_UP)", errno);
    close(static_cast<int>(fd));
    return -1;
  }
  return static_cast<int>(fd);
}

void RunTarget(Setup& setup, uint64_t rounds, SideResult* out) {
  std::string why;
  int fd = InstallFilter(&why);
  setup.Publish(fd, gettid(), why);
  if (fd < 0) return;

  wl::Rng rng(4000);
  SideResult r;
  for (uint64_t i = 0; i < rounds; ++i) {
    size_t size = RequestSize(rng);
    uint64_t cookie = rng.Next();
    void* req = AllocOrFail(size);
    wl::FillPattern(req, size, cookie);
    long ret = syscall(SYS_getppid, req, size, cookie, i, 0, kMagic);
    if (ret == -1) {
      Fail("round %llu: intercepted getppid failed: %s",
           static_cast<unsigned long long>(i), strerror(errno));
    }
    void* reply = reinterpret_cast<void*>(ret);
    if (!wl::CheckPattern(reply, ReplySize(cookie), cookie ^ kReplyKey)) {
      Fail("round %llu: reply %p (%zu bytes) corrupt",
           static_cast<unsigned long long>(i), reply, ReplySize(cookie));
    }
    free(reply);
    free(req);
    r.rounds++;
    r.sum += cookie;
  }
  // Tell the supervisor to stop.
  if (syscall(SYS_getppid, 0, 0, 0, rounds, 0, kMagic) != 0) {
    Fail("stop request: unexpected result");
  }
  *out = r;
}

void RunSupervisor(Setup& setup, SideResult* out) {
  setup.Wait();
  if (setup.fd < 0) return;
  const int fd = setup.fd;

  struct seccomp_notif_sizes sizes;
  if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) {
    Fail("SECCOMP_GET_NOTIF_SIZES: %s", strerror(errno));
  }
  // The kernel writes its own struct sizes; give it room for a newer kernel.
  alignas(8) unsigned char notif_buf[512];
  alignas(8) unsigned char resp_buf[512];
  if (sizes.seccomp_notif > sizeof(notif_buf) ||
      sizes.seccomp_notif_resp > sizeof(resp_buf) ||
      sizes.seccomp_notif < sizeof(struct seccomp_notif) ||
      sizes.seccomp_notif_resp < sizeof(struct seccomp_notif_resp)) {
    Fail("unexpected seccomp notification sizes %u / %u",
         sizes.seccomp_notif, sizes.seccomp_notif_resp);
  }
  auto* notif = reinterpret_cast<struct seccomp_notif*>(notif_buf);
  auto* resp = reinterpret_cast<struct seccomp_notif_resp*>(resp_buf);

  SideResult r;
  bool stop = false;
  while (!stop) {
    memset(notif_buf, 0, sizes.seccomp_notif);
    if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, notif) != 0) {
      if (errno == EINTR) continue;
      Fail("SECCOMP_IOCTL_NOTIF_RECV: %s", strerror(errno));
    }
    memset(resp_buf, 0, sizes.seccomp_notif_resp);
    resp->id = notif->id;
    const __u64* a = notif->data.args;
    if (notif->data.nr != __NR_getppid || a[5] != kMagic) {
      // Someone else's getppid(): let it run.
      resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    } else {
      if (static_cast<pid_t>(notif->pid) != setup.target_tid) {
        Fail("notification from tid %u, target is %d", notif->pid,
             static_cast<int>(setup.target_tid));
      }
      void* req = reinterpret_cast<void*>(a[0]);
      size_t size = a[1];
      uint64_t cookie = a[2];
      if (a[3] != r.rounds) {
        Fail("notification for round %llu, expected %llu",
             static_cast<unsigned long long>(a[3]),
             static_cast<unsigned long long>(r.rounds));
      }
      if (req == nullptr) {
        resp->val = 0;
        stop = true;
      } else {
        // Same address space, so the request is read in place (a
        // supervisor of another process would use process_vm_readv).
        if (!wl::CheckPattern(req, size, cookie)) {
          Fail("round %llu: request %p (%zu bytes) corrupt",
               static_cast<unsigned long long>(r.rounds), req, size);
        }
        // Per-notification scratch (a path or message buffer).
        size_t scratch_size = 32 + (cookie & 255);
        void* scratch = AllocOrFail(scratch_size);
        wl::FillPattern(scratch, scratch_size, cookie + 1);
        if (!wl::CheckPattern(scratch, scratch_size, cookie + 1)) {
          Fail("scratch buffer %p corrupt", scratch);
        }
        free(scratch);
        size_t rsize = ReplySize(cookie);
        void* reply = AllocOrFail(rsize);
        wl::FillPattern(reply, rsize, cookie ^ kReplyKey);
        resp->val = reinterpret_cast<int64_t>(reply);
        r.rounds++;
        r.sum += cookie;
      }
    }
    if (ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, resp) != 0) {
      Fail("SECCOMP_IOCTL_NOTIF_SEND: %s", strerror(errno));
    }
  }
  close(fd);
  *out = r;
}

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "handoff";
  wl::Args args(argc, argv, "mode");
  std::string mode = args.GetChoice("mode", "migrate pinned seccomp", "migrate");
  // Full sizes: 2-4 s under glibc malloc on the 2-vCPU reference machine.
  uint64_t rounds = 0;
  if (mode == "migrate") rounds = 250'000;
  if (mode == "pinned") rounds = 250'000;
  if (mode == "seccomp") rounds = 250'000;
  if (args.quick()) rounds /= 20;

  SideResult ra, rb;
  double t0 = wl::NowSeconds();
  if (mode == "seccomp") {
    Setup setup;
    std::thread sup([&] { RunSupervisor(setup, &rb); });
    std::thread target([&] { RunTarget(setup, rounds, &ra); });
    target.join();
    sup.join();
    if (!setup.skip.empty()) wl::Skip("%s", setup.skip.c_str());
  } else {
    int cpu = -1;
    if (mode == "pinned") {
      cpu = wl::FirstAllowedCpu();
      if (cpu < 0) Fail("sched_getaffinity: %s", strerror(errno));
      printf("metric cpu=%d\n", cpu);
    }
    PingPong pp;
    std::thread b([&] { RunB(pp, cpu, &rb); });
    std::thread a([&] { RunA(pp, rounds, cpu, &ra); });
    a.join();
    b.join();
  }
  double secs = wl::NowSeconds() - t0;

  if (ra.rounds != rounds || rb.rounds != rounds) {
    Fail("rounds: requester %llu, responder %llu, expected %llu",
         static_cast<unsigned long long>(ra.rounds),
         static_cast<unsigned long long>(rb.rounds),
         static_cast<unsigned long long>(rounds));
  }
  if (ra.sum != rb.sum) {
    Fail("checksum: requester 0x%016llx, responder 0x%016llx",
         static_cast<unsigned long long>(ra.sum),
         static_cast<unsigned long long>(rb.sum));
  }
  printf("metric us_per_round_trip=%.3f\n",
         secs * 1e6 / static_cast<double>(rounds));
  wl::Ok(secs, "mode=%s rounds=%llu checksum=%016llx", mode.c_str(),
         static_cast<unsigned long long>(rounds),
         static_cast<unsigned long long>(ra.sum));
  return 0;
}
