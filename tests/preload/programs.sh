# tests/preload/programs.sh: the real programs of tests/preload_test.sh
# (which sources it), each run with the library preloaded and on glibc's
# malloc and its output compared: python3 (tests/preload/alloc_heavy.py;
# tests/preload/alloc_threads.py), sort (~50 MB, tests/preload/sort_input.awk),
# gcc (a C file from tests/preload/gen_c.sh), git (a 200-file repository),
# perl (a big hash, tests/preload/big_hash.pl), the JVM (javac, then
# tests/preload/AllocHeavy.java on a pool of threads) and a Redis server
# (bench/runner/redis_session.sh: its data set's digest; also with I/O
# threads).  Paths are relative to the repository root,
# tests/preload_test.sh's working directory; the helpers (pre, base, same,
# run_to, ...) are tests/preload/harness.sh's.
# shellcheck shell=bash

# --- python3 -----------------------------------------------------------------

PY=/usr/bin/python3

# python_base_file SCRIPT: where python_baseline keeps SCRIPT's output.
python_base_file() { echo "$TMP/py.${1##*/}.base"; }

# python_baseline SCRIPT: SCRIPT's output on glibc's malloc, once a run.
python_baseline() {
  local base
  base="$(python_base_file "$1")"
  [[ -s "$base" ]] && return 0
  run_to "$base" "$base.err" "python3 ${1##*/} (glibc)" \
    base PYTHONHASHSEED=0 "$PY" "$1"
}

# check_python [PYTHONMALLOC] [SCRIPT]: SCRIPT (tests/preload/alloc_heavy.py
# by default; alloc_threads.py runs four threads) under cidmalloc, its
# output compared with glibc's.
check_python() {
  local script="${2:-tests/preload/alloc_heavy.py}"
  local base
  base="$(python_base_file "$script")"
  need "$PY" || return
  python_baseline "$script" || return 1
  local -a env=(PYTHONHASHSEED=0)
  [[ -n "${1:-}" ]] && env+=(PYTHONMALLOC="$1")
  run_to "$TMP/py.pre" "$TMP/py.pre.err" "python3 ${script##*/}" \
    pre "${env[@]}" "$PY" "$script" || return 1
  same "$base" "$TMP/py.pre" "python3 output" || return 1
  say "$(head -1 "$TMP/py.pre")"
}

# --- sort --------------------------------------------------------------------

# ~50 MB, 1.7 M lines (tests/preload/sort_input.awk).
sort_input() {
  [[ -s "$TMP/sort.in" ]] && return 0
  awk -v lines=1700000 -f tests/preload/sort_input.awk >"$TMP/sort.in"
  LC_ALL=C sort "$TMP/sort.in" | sha256sum >"$TMP/sort.base"
}

check_sort() {
  need sort awk sha256sum || return
  sort_input || { say "could not generate the input"; return 1; }
  local rc=0
  pre LC_ALL=C sort "$TMP/sort.in" 2>"$TMP/sort.err" | sha256sum >"$TMP/sort.pre" ||
    rc=$?
  if ((rc != 0)); then
    status_of "$rc" "sort"
    tail -n 5 "$TMP/sort.err" >&2
    return 1
  fi
  same "$TMP/sort.base" "$TMP/sort.pre" "sha256 of sorted output" || return 1
  say "$(wc -c <"$TMP/sort.in") bytes, sha256 $(cut -c1-16 "$TMP/sort.pre")"
}

# --- gcc ---------------------------------------------------------------------

check_gcc() {
  need gcc || return
  local d="$TMP/gcc"
  mkdir -p "$d/base" "$d/pre"
  tests/preload/gen_c.sh 150 >"$d/prog.c"
  cp "$d/prog.c" "$d/base/prog.c"
  cp "$d/prog.c" "$d/pre/prog.c"
  # Same relative paths in both: the compiler's output may name them.
  (cd "$d/base" && run_to cc.out cc.err "gcc (glibc)" base gcc -O1 -o prog prog.c) ||
    return 1
  (cd "$d/pre" && run_to cc.out cc.err "gcc" pre gcc -O1 -o prog prog.c) ||
    return 1
  # gcc is deterministic: the same source gives the same executable.
  same "$d/base/prog" "$d/pre/prog" "compiled executable" || return 1
  run_to "$d/base.out" "$d/base.err" "prog (glibc)" base "$d/base/prog" || return 1
  run_to "$d/pre.out" "$d/pre.err" "prog" pre "$d/pre/prog" || return 1
  same "$d/base.out" "$d/pre.out" "program output" || return 1
  say "$(wc -l <"$d/prog.c") lines of C, $(cat "$d/pre.out")"
}

# --- git ---------------------------------------------------------------------

# git_session WHO DIR: builds the same repository in DIR, with WHO (pre or
# base) running every git command; prints what the comparison looks at.
git_session() {
  local who="$1" repo="$2"
  mkdir -p "$repo"
  # 200 files of 1..200 lines, in 10 directories.
  awk -v repo="$repo" 'BEGIN {
    for (i = 1; i <= 200; i++) {
      f = sprintf("%s/dir%d/file%03d.txt", repo, i % 10, i)
      if (i <= 10) system("mkdir -p " repo "/dir" i % 10)
      for (j = 1; j <= i; j++) print "file " i " line " j " " (i * j % 97) > f
      close(f)
    }
  }'
  # git_step ARGS...: one git command; names the command that failed or hung.
  git_step() {
    local rc=0
    "$who" git -C "$repo" "$@" || rc=$?
    ((rc == 0)) || status_of "$rc" "git $*"
    return "$rc"
  }
  git_step init -q -b main || return 1
  git_step add . || return 1
  git_step commit -q -m "200 files" || return 1
  local i
  for ((i = 1; i <= 200; i += 9)); do
    echo "changed $i" >>"$repo/dir$((i % 10))/file$(printf %03d "$i").txt"
  done
  git_step rm -q "dir0/file200.txt" || return 1
  git_step commit -q -a -m "change 23 files, remove 1" || return 1
  git_step log --stat --format='%H %an %ad %s' || return 1
  git_step gc -q --prune=now || return 1
  git_step fsck --full --strict --no-progress || return 1
  git_step count-objects -v | grep -E '^(count|in-pack|packs):' || return 1
  git_step ls-tree -r HEAD | sha256sum
}

check_git() {
  need git awk || return
  # Reproducible commits: fixed identity and dates, no user configuration.
  local -a env=(
    HOME="$TMP/git-home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
    GIT_AUTHOR_NAME=cidmalloc GIT_AUTHOR_EMAIL=cidmalloc@example.invalid
    GIT_COMMITTER_NAME=cidmalloc GIT_COMMITTER_EMAIL=cidmalloc@example.invalid
    GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
  )
  mkdir -p "$TMP/git-home"
  # Fresh repositories each time: the check runs once per variant.
  rm -rf "$TMP/git-base" "$TMP/git-pre"
  # git_env_session WHO REPO: git_session in that environment (a subshell).
  git_env_session() { (export "${env[@]}"; git_session "$@"); }
  run_to "$TMP/git.base" "$TMP/git.base.err" "git on glibc" \
    git_env_session base "$TMP/git-base" || return 1
  run_to "$TMP/git.pre" "$TMP/git.pre.err" "git under cidmalloc" \
    git_env_session pre "$TMP/git-pre" || return 1
  if [[ -s "$TMP/git.pre.err" ]]; then
    say "git printed on stderr:"
    head -5 "$TMP/git.pre.err" >&2
    return 1
  fi
  # Same commit IDs, stats, object counts and tree: byte for byte.
  same "$TMP/git.base" "$TMP/git.pre" "git log / fsck / count-objects" ||
    return 1
  grep -q '^packs: 1$' "$TMP/git.pre" || { say "gc did not pack"; return 1; }
  say "HEAD $(head -1 "$TMP/git.pre" | cut -c1-12), $(grep -c 'file' "$TMP/git.pre") log lines"
}

# --- perl --------------------------------------------------------------------

check_perl() {
  need perl || return
  run_to "$TMP/perl.base" "$TMP/perl.base.err" "perl (glibc)" \
    base perl -e "$(cat tests/preload/big_hash.pl)" || return 1
  run_to "$TMP/perl.pre" "$TMP/perl.pre.err" "perl" \
    pre perl -e "$(cat tests/preload/big_hash.pl)" || return 1
  same "$TMP/perl.base" "$TMP/perl.pre" "perl output" || return 1
  say "$(cat "$TMP/perl.pre")"
}

# --- java --------------------------------------------------------------------

# javac compiles tests/preload/AllocHeavy.java (the same class file on both
# allocators: javac is deterministic), then the JVM runs it: threads of the
# program's pool and of the JVM's own (JIT compilers, garbage collector,
# reference handler) allocate and free, natively through zlib and direct
# buffers.  No performance data file in /tmp (-XX:-UsePerfData).
check_java() {
  need javac java || return
  local d="$TMP/java" src=tests/preload/AllocHeavy.java
  rm -rf "$d"
  mkdir -p "$d/base" "$d/pre"
  run_to "$d/javac.base.out" "$d/javac.base.err" "javac (glibc)" \
    base javac -J-XX:-UsePerfData -d "$d/base" "$src" || return 1
  run_to "$d/javac.pre.out" "$d/javac.pre.err" "javac" \
    pre javac -J-XX:-UsePerfData -d "$d/pre" "$src" || return 1
  same "$d/base/AllocHeavy.class" "$d/pre/AllocHeavy.class" "class file" ||
    return 1
  run_to "$d/base.out" "$d/base.err" "java (glibc)" \
    base java -XX:-UsePerfData -cp "$d/base" AllocHeavy || return 1
  run_to "$d/pre.out" "$d/pre.err" "java" \
    pre java -XX:-UsePerfData -cp "$d/pre" AllocHeavy || return 1
  if [[ -s "$d/pre.err" ]]; then
    say "java printed on stderr:"
    head -5 "$d/pre.err" >&2
    return 1
  fi
  same "$d/base.out" "$d/pre.out" "program output" || return 1
  say "$(cat "$d/pre.out")"
}

# --- redis -------------------------------------------------------------------

# A Redis server session (bench/runner/redis_session.sh, 40,000 keys): the
# server, preloaded, is filled and churned through pipelined clients and
# forks for a BGSAVE meanwhile (its background I/O threads and the child
# allocate too); the RDB file must check out and the data set's DEBUG
# DIGEST must equal the one under glibc's malloc.  The clients run on
# glibc's malloc.
REDIS_SESSION=bench/runner/redis_session.sh

redis_baseline() {
  [[ -s "$TMP/redis.base" ]] && return 0
  run_to "$TMP/redis.base.out" "$TMP/redis.base.err" "redis (glibc)" \
    base bash "$REDIS_SESSION" check "$TMP/redis" 40000 || return 1
  tail -n 1 "$TMP/redis.base.out" >"$TMP/redis.base"
}

# check_redis_io_threads: the session in bench mode with two I/O threads,
# which read queries into buffers they grow and write replies while the
# main thread runs commands (Redis hands them clients only under load:
# redis-benchmark's 8 pipelined clients); the same data set, and the I/O
# threads must have read something.
check_redis_io_threads() {
  need redis-cli redis-check-rdb redis-benchmark || return
  redis_baseline || return 1
  run_to "$TMP/redis.io.out" "$TMP/redis.io.err" "redis (I/O threads)" \
    pre REDIS_SERVER_ARGS="--io-threads 2 --io-threads-do-reads yes" \
    REDIS_BENCH_REQUESTS=30000 bash "$REDIS_SESSION" bench "$TMP/redis" 40000 ||
    return 1
  tail -n 1 "$TMP/redis.io.out" >"$TMP/redis.io"
  same "$TMP/redis.base" "$TMP/redis.io" "redis data set" || return 1
  local reads
  reads="$(sed -n 's/^metric io_threaded_reads_processed=//p' \
    "$TMP/redis.io.out")"
  [[ "$reads" =~ ^[1-9][0-9]*$ ]] ||
    { say "the I/O threads read nothing ('$reads')"; return 1; }
  say "$(cat "$TMP/redis.io"); $reads reads on I/O threads"
}

check_redis() {
  need redis-cli redis-check-rdb || return
  redis_baseline || return 1
  run_to "$TMP/redis.pre.out" "$TMP/redis.pre.err" "redis" \
    pre bash "$REDIS_SESSION" check "$TMP/redis" 40000 || return 1
  tail -n 1 "$TMP/redis.pre.out" >"$TMP/redis.pre"
  same "$TMP/redis.base" "$TMP/redis.pre" "redis data set" || return 1
  say "$(cat "$TMP/redis.pre")"
}
