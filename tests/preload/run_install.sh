# tests/preload/run_install.sh: the front script's `./cidmalloc run` (a
# command, and the demo) and `./cidmalloc install` (into a temporary prefix,
# then a program linked with the installed archive, dynamically and with
# -static, and against the installed shared library), for tests/preload_test.sh
# (which sources it and runs them from the repository root).  The helpers
# (base, say, status_of, ...) are tests/preload/harness.sh's; PY is
# tests/preload/programs.sh's.
# shellcheck shell=bash

# --- ./cidmalloc run and install ---------------------------------------------

# The last line of stderr file $1 is the CIDMALLOC_STATS=1 summary's.
ends_with_summary() {
  tail -n 1 "$1" | grep -qE '^cidmalloc: mallocs [0-9]+, front-end hit rate'
}

# As a user would type it: plain `python3` from PATH (a pyenv shim is
# resolved by `run`, so there is still exactly one summary, python's).
check_run_command() {
  need python3 || return
  local rc=0
  timeout -k 5 "$LIMIT" ./cidmalloc run -- python3 -c 'print(sum(range(10**6)))' \
    >"$TMP/run.out" 2>"$TMP/run.err" </dev/null || rc=$?
  if ((rc != 0)); then
    status_of "$rc" "./cidmalloc run -- python3"
    tail -n 10 "$TMP/run.err" >&2
    return 1
  fi
  [[ "$(cat "$TMP/run.out")" == 499999500000 ]] ||
    { say "stdout: $(head -n 3 "$TMP/run.out")"; return 1; }
  # The summary ends stderr (CIDMALLOC_STATS=1 by default), once.
  ends_with_summary "$TMP/run.err" ||
    { say "stderr does not end with the summary:"; tail -n 5 "$TMP/run.err" >&2; return 1; }
  local n
  n="$(grep -c '^cidmalloc: mode' "$TMP/run.err")"
  ((n == 1)) || { say "$n summaries on stderr, want 1 (python3 is $(type -P python3))"; return 1; }
  # Exit status passes through; a caller's CIDMALLOC_STATS=0 is kept.
  rc=0
  CIDMALLOC_STATS=0 timeout -k 5 "$LIMIT" ./cidmalloc run -- "$PY" -c 'raise SystemExit(7)' \
    >"$TMP/run7.out" 2>"$TMP/run7.err" </dev/null || rc=$?
  ((rc == 7)) || { say "./cidmalloc run -- python3 -c 'raise SystemExit(7)' exited $rc"; return 1; }
  ! grep -q '^cidmalloc: ' "$TMP/run7.err" ||
    { say "CIDMALLOC_STATS=0 still printed a summary"; return 1; }
  # sort (coreutils, gnulib's closeout) closes stderr in an atexit handler,
  # before the library's destructor runs: the summary must still come,
  # through the duplicate of stderr kept for it.
  printf 'b\na\n' >"$TMP/sort.in"
  rc=0
  timeout -k 5 "$LIMIT" ./cidmalloc run -- sort "$TMP/sort.in" \
    >"$TMP/sort.out" 2>"$TMP/sort.err" </dev/null || rc=$?
  ((rc == 0)) || { status_of "$rc" "./cidmalloc run -- sort"; return 1; }
  [[ "$(tr '\n' ' ' <"$TMP/sort.out")" == "a b " ]] ||
    { say "sort printed: $(head -n 3 "$TMP/sort.out")"; return 1; }
  ends_with_summary "$TMP/sort.err" ||
    { say "sort closed stderr and no summary came:"; tail -n 5 "$TMP/sort.err" >&2; return 1; }
  # true never calls malloc, and the summary still comes (mallocs 0): the
  # allocator initialises at exit when the knob asks for it.  The bench
  # runner reads the mode this way too.
  rc=0
  timeout -k 5 "$LIMIT" ./cidmalloc run -- true >/dev/null 2>"$TMP/true.err" </dev/null || rc=$?
  ((rc == 0)) || { status_of "$rc" "./cidmalloc run -- true"; return 1; }
  if ! grep -q '^cidmalloc: mode ' "$TMP/true.err" ||
    ! tail -n 1 "$TMP/true.err" | grep -qE '^cidmalloc: mallocs 0, '; then
    say "no summary for a program that never allocates:"
    tail -n 5 "$TMP/true.err" >&2
    return 1
  fi
  say "499999500000 and one summary; exit status 7 passed through; sort's summary despite its closed stderr; true's summary (mallocs 0)"
}

check_run_demo() {
  local rc=0
  timeout -k 5 "$LIMIT" ./cidmalloc run >"$TMP/demo.out" 2>"$TMP/demo.err" </dev/null || rc=$?
  if ((rc != 0)); then
    status_of "$rc" "./cidmalloc run (demo)"
    tail -n 5 "$TMP/demo.out" "$TMP/demo.err" >&2
    return 1
  fi
  grep -q '^demo: self-check OK$' "$TMP/demo.out" ||
    { say "no 'self-check OK'"; tail -n 5 "$TMP/demo.out" >&2; return 1; }
  grep -q 'allocator: cidmalloc$' "$TMP/demo.out" ||
    { say "the demo did not run under cidmalloc"; return 1; }
  local ids slabs hit
  ids="$(sed -nE 's/^cidmalloc: (cids|cpus|soft IDs) seen ([0-9]+), .*/\2/p' "$TMP/demo.err")"
  slabs="$(sed -nE 's/^cidmalloc: .* seen [0-9]+, slabs touched ([0-9]+) .*/\1/p' "$TMP/demo.err")"
  hit="$(sed -nE 's/.*front-end hit rate ([0-9]+)\.[0-9]%.*/\1/p' "$TMP/demo.err")"
  say "$(grep '^demo: total' "$TMP/demo.out")"
  say "IDs seen ${ids:-?}, slabs touched ${slabs:-?}, hit rate ${hit:-?}%"
  [[ -n "$slabs" && "$slabs" -ge 1 ]] || { say "no slab touched"; return 1; }
  [[ -n "$ids" && "$ids" -ge 1 && "$ids" -le "$slabs" ]] ||
    { say "IDs seen not between 1 and the slabs touched"; return 1; }
  [[ -n "$hit" && "$hit" -ge 80 ]] || { say "hit rate below 80%"; return 1; }
}

# The mode check_install's program printed to file $1 ("mode cid, ...").
prog_mode() { sed -n 's/^mode \([a-z]*\),.*/\1/p' "$1"; }

check_install() {
  need g++ ar pkg-config readelf || return
  local prefix="$TMP/prefix" rc=0
  timeout -k 5 120 ./cidmalloc install "$prefix" >"$TMP/install.out" 2>&1 </dev/null ||
    rc=$?
  if ((rc != 0)); then
    status_of "$rc" "./cidmalloc install"
    tail -n 10 "$TMP/install.out" >&2
    return 1
  fi
  local f
  for f in lib/libcidmalloc.so lib/libcidmalloc.a include/cidmalloc.h \
    lib/pkgconfig/cidmalloc.pc lib/pkgconfig/cidmalloc-static.pc; do
    [[ -s "$prefix/$f" ]] || { say "missing $prefix/$f"; return 1; }
  done
  # A C program linked the documented way, against the installed files.
  cat >"$TMP/prog.c" <<'EOF'
#include <cidmalloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Blocks of 16 to 8008 bytes, written, checked and freed: a thread's first
   malloc and its caches.  Returns &failed if a block lost its bytes. */
static char failed;
static void *churn(void *arg) {
  char *p[1000];
  void *result = NULL;
  (void)arg;
  for (int i = 0; i < 1000; ++i) {
    p[i] = malloc(16 + i * 8);
    if (p[i] == NULL) return &failed;
    memset(p[i], i & 0xff, 16 + i * 8);
  }
  for (int i = 0; i < 1000; ++i) {
    if (p[i][15 + i * 8] != (char)(i & 0xff)) result = &failed;
    free(p[i]);
  }
  return result;
}
int main(void) {
  struct cidmalloc_stats s;
  pthread_t t[2];
  void *bad = churn(NULL);
  for (int i = 0; i < 2; ++i) pthread_create(&t[i], NULL, churn, NULL);
  for (int i = 0; i < 2; ++i) {
    void *r;
    pthread_join(t[i], &r);
    if (r != NULL) bad = r;
  }
  if (bad != NULL) {
    puts("a block lost its contents");
    return 1;
  }
  if (cidmalloc_get_stats(&s) != 0 || s.mode == NULL || s.mode[0] == '\0') {
    puts("no cidmalloc stats");
    return 1;
  }
  printf("mode %s, %u slab(s), %llu mallocs counted\n", s.mode, s.slabs,
         s.mallocs);
  return s.slabs >= 1 && s.mallocs >= 3000 ? 0 : 1;
}
EOF
  (cd "$TMP" && gcc -c -I"$prefix/include" prog.c -o prog.o &&
    g++ prog.o -L"$prefix/lib" -Wl,--whole-archive -l:libcidmalloc.a \
      -Wl,--no-whole-archive -lpthread -o prog) >&2 ||
    { say "linking with the installed libcidmalloc.a failed"; return 1; }
  # Really static: no libcidmalloc.so needed at run time.
  if ldd "$TMP/prog" | grep -q libcidmalloc; then
    say "prog depends on libcidmalloc.so"
    return 1
  fi
  run_to "$TMP/prog.out" "$TMP/prog.err" "statically linked prog" \
    base CIDMALLOC_STATS=1 "$TMP/prog" || return 1
  grep -q '^cidmalloc: mode' "$TMP/prog.err" || { say "no summary at exit"; return 1; }
  # The same program fully static (-static: glibc's libc.a too, no loader),
  # as a service built without shared libraries links it: the link must not
  # pull glibc's malloc in beside cidmalloc's (duplicate definitions), and
  # static glibc's rseq registration must give the same mode.
  # Linked with the flags of the installed cidmalloc-static.pc.
  local flags
  local -a pc_static pc_shared
  flags="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
    pkg-config --libs cidmalloc-static)" ||
    { say "pkg-config --libs cidmalloc-static failed"; return 1; }
  read -ra pc_static <<<"$flags"
  (cd "$TMP" && g++ -static prog.o "${pc_static[@]}" -o prog_static) >&2 ||
    { say "linking prog -static with libcidmalloc.a failed"; return 1; }
  if ldd "$TMP/prog_static" >/dev/null 2>&1; then
    say "prog_static is a dynamic executable"
    return 1
  fi
  run_to "$TMP/static.out" "$TMP/static.err" "fully static prog" \
    base CIDMALLOC_STATS=1 "$TMP/prog_static" || return 1
  local mode_linked mode_static
  mode_linked="$(prog_mode "$TMP/prog.out")"
  mode_static="$(prog_mode "$TMP/static.out")"
  if [[ -z "$mode_static" || "$mode_static" != "$mode_linked" ]]; then
    say "fully static: '$(cat "$TMP/static.out")'," \
      "linked: '$(cat "$TMP/prog.out")'"
    return 1
  fi
  grep -q '^cidmalloc: mode' "$TMP/static.err" ||
    { say "no summary at exit (fully static)"; return 1; }
  # Linked against the installed shared library (cidmalloc.pc's
  # -lcidmalloc): a dependency of the program, found through
  # LD_LIBRARY_PATH, not preloaded.
  flags="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
    pkg-config --cflags --libs cidmalloc)" ||
    { say "pkg-config --cflags --libs cidmalloc failed"; return 1; }
  read -ra pc_shared <<<"$flags"
  (cd "$TMP" && gcc prog.c "${pc_shared[@]}" -lpthread -o prog_shared) >&2 ||
    { say "linking prog against libcidmalloc.so failed"; return 1; }
  readelf -d "$TMP/prog_shared" | grep -q 'NEEDED.*\[libcidmalloc\.so\]' ||
    { say "prog_shared does not depend on libcidmalloc.so"; return 1; }
  run_to "$TMP/shared.out" "$TMP/shared.err" "prog linked with -lcidmalloc" \
    base LD_LIBRARY_PATH="$prefix/lib" CIDMALLOC_STATS=1 "$TMP/prog_shared" || return 1
  [[ "$(prog_mode "$TMP/shared.out")" == "$mode_linked" ]] ||
    { say "-lcidmalloc: '$(cat "$TMP/shared.out")'"; return 1; }
  # And the installed shared library, preloaded.
  run_to "$TMP/so.out" "$TMP/so.err" "installed libcidmalloc.so" \
    base LD_PRELOAD="$prefix/lib/libcidmalloc.so" CIDMALLOC_STATS=1 "$PY" -c 'print(6 * 7)' ||
    return 1
  if [[ "$(cat "$TMP/so.out")" != 42 ]] || ! grep -q '^cidmalloc: mode' "$TMP/so.err"; then
    say "the installed libcidmalloc.so is not in use"
    return 1
  fi
  say "linked: $(cat "$TMP/prog.out"); fully static: $(cat "$TMP/static.out")"
}
