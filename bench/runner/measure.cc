// bench/runner/measure.cc: runs one command and writes what it cost: the
// launcher of bench/runner/bench.py (`./cidmalloc bench`).
//
//   measure --result FILE [--timeout SECS] [--setenv NAME=VALUE]...
//           [--unsetenv NAME]... -- CMD [ARGS...]
//
// Forks, puts the child in a process group of its own, applies the
// --setenv / --unsetenv changes in the child only, and execs CMD (searched in
// PATH).  stdin, stdout and stderr are inherited.  Then waits with wait4 and
// writes FILE, one "key=value" per line:
//
//   exit=N | signal=N      how the command ended (exit=127: exec failed)
//   timed_out=0|1          1: killed (SIGKILL to the group) after SECS
//   wall_ns=N              CLOCK_MONOTONIC from before fork to after wait4
//   maxrss_kb=N            ru_maxrss of the child (covers the descendants
//                          it reaped: gcc's cc1 and as)
//   utime_us=N, stime_us=N CPU time of the child and its reaped descendants
//   self_us=N              this launcher's own CPU time
//   stat_before=..., stat_after=...
//                          the "cpu" line of /proc/stat (clock ticks: user
//                          nice system idle iowait irq softirq steal)
//
// Why a separate program and not Python's fork/exec: ru_maxrss is a high-
// water mark the kernel keeps per process across exec, and it starts at the
// resident size of the memory the child inherited (fork copies the page
// tables; posix_spawn's vfork shares the parent's).  Spawned from the Python
// runner, every command would report at least the runner's ~10 MB.  This
// program links libc only and touches little, so the floor is well under
// 1 MB.  The runner's environment (LD_PRELOAD in particular) is not this
// program's: the allocator under test is set with --setenv for the child.
//
// SIGINT / SIGTERM / SIGHUP kill the child's group too, then this program
// reports and exits.  Exit status: 0 when FILE was written, 2 on bad usage
// or when FILE cannot be written.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_timed_out = 0;

void KillGroup() {
  if (g_child > 0) kill(-static_cast<pid_t>(g_child), SIGKILL);
}

void OnAlarm(int) {
  g_timed_out = 1;
  KillGroup();
}

void OnTerminate(int) { KillGroup(); }

// The first line of /proc/stat, "cpu  u n s i w irq softirq steal ...",
// copied as text up to the 8th number.  Returns false if unreadable.
bool ReadStat(char* out, size_t size) {
  int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 4 || strncmp(buf, "cpu ", 4) != 0) return false;
  buf[n] = '\0';
  const char* p = buf + 4;
  size_t len = 0;
  for (int field = 0; field < 8; ++field) {
    while (*p == ' ') ++p;
    if (*p < '0' || *p > '9') return false;
    if (len != 0 && len + 1 < size) out[len++] = ' ';
    while (*p >= '0' && *p <= '9') {
      if (len + 1 < size) out[len++] = *p;
      ++p;
    }
  }
  out[len] = '\0';
  return true;
}

long long Micros(const timeval& tv) {
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

int Usage() {
  fprintf(stderr,
          "usage: measure --result FILE [--timeout SECS] "
          "[--setenv NAME=VALUE]... [--unsetenv NAME]... -- CMD [ARGS...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const char* result = nullptr;
  double timeout = 0;
  // Environment changes for the child: argv indices of the values, applied
  // in order.  At most argc of them.
  int* changes = static_cast<int*>(calloc(static_cast<size_t>(argc), sizeof(int)));
  bool* is_set = static_cast<bool*>(calloc(static_cast<size_t>(argc), sizeof(bool)));
  if (changes == nullptr || is_set == nullptr) return 2;
  int num_changes = 0;
  int i = 1;
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--") == 0) {
      ++i;
      break;
    }
    if (i + 1 >= argc) return Usage();
    if (strcmp(a, "--result") == 0) {
      result = argv[++i];
    } else if (strcmp(a, "--timeout") == 0) {
      char* end;
      timeout = strtod(argv[++i], &end);
      if (*end != '\0' || timeout < 0) return Usage();
    } else if (strcmp(a, "--setenv") == 0) {
      if (strchr(argv[i + 1], '=') == nullptr) return Usage();
      is_set[num_changes] = true;
      changes[num_changes++] = ++i;
    } else if (strcmp(a, "--unsetenv") == 0) {
      is_set[num_changes] = false;
      changes[num_changes++] = ++i;
    } else {
      return Usage();
    }
  }
  if (result == nullptr || i >= argc) return Usage();
  char** cmd = argv + i;

  int out = open(result, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    fprintf(stderr, "measure: %s: %s\n", result, strerror(errno));
    return 2;
  }

  // Signals that end the run are blocked around fork, so a handler never
  // sees a child that is not yet recorded in g_child.
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = OnAlarm;
  sigaction(SIGALRM, &sa, nullptr);
  sa.sa_handler = OnTerminate;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGALRM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  sigprocmask(SIG_BLOCK, &block, &old);

  char stat_before[256] = "", stat_after[256] = "";
  bool have_stat = ReadStat(stat_before, sizeof stat_before);
  rusage self_before;
  getrusage(RUSAGE_SELF, &self_before);
  timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);

  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "measure: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    setpgid(0, 0);
    // Default dispositions for what the runner (Python) ignores and what
    // this program handles; exec resets handled ones, not ignored ones.
    signal(SIGPIPE, SIG_DFL);
    signal(SIGXFSZ, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    for (int c = 0; c < num_changes; ++c) {
      char* v = argv[changes[c]];
      if (is_set[c]) {
        putenv(v);
      } else {
        unsetenv(v);
      }
    }
    execvp(cmd[0], cmd);
    fprintf(stderr, "measure: cannot run %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // Also here: the child may not have run yet.
  g_child = pid;
  if (timeout > 0) {
    itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = static_cast<time_t>(timeout);
    it.it_value.tv_usec =
        static_cast<suseconds_t>((timeout - static_cast<double>(it.it_value.tv_sec)) * 1e6);
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &it, nullptr);
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);

  int status = 0;
  rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "measure: wait4: %s\n", strerror(errno));
      return 2;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  sigprocmask(SIG_BLOCK, &block, nullptr);
  g_child = 0;
  if (have_stat) have_stat = ReadStat(stat_after, sizeof stat_after);
  rusage self_after;
  getrusage(RUSAGE_SELF, &self_after);

  long long wall_ns = (static_cast<long long>(t1.tv_sec) - t0.tv_sec) * 1000000000LL +
                      (t1.tv_nsec - t0.tv_nsec);
  long long self_us = Micros(self_after.ru_utime) - Micros(self_before.ru_utime) +
                      Micros(self_after.ru_stime) - Micros(self_before.ru_stime);
  if (WIFEXITED(status)) {
    dprintf(out, "exit=%d\n", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    dprintf(out, "signal=%d\n", WTERMSIG(status));
  }
  dprintf(out,
          "timed_out=%d\nwall_ns=%lld\nmaxrss_kb=%ld\nutime_us=%lld\n"
          "stime_us=%lld\nself_us=%lld\n",
          g_timed_out ? 1 : 0, wall_ns, ru.ru_maxrss, Micros(ru.ru_utime),
          Micros(ru.ru_stime), self_us);
  if (have_stat) {
    dprintf(out, "stat_before=%s\nstat_after=%s\n", stat_before, stat_after);
  }
  if (close(out) != 0) return 2;
  return 0;
}
