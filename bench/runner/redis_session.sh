#!/usr/bin/env bash
# bench/runner/redis_session.sh: a Redis server session whose outcome can
# be compared between allocators.  The server inherits the caller's
# environment (LD_PRELOAD, CIDMALLOC_*); everything else this script starts
# (awk, its clients redis-cli and redis-benchmark) runs on glibc's malloc,
# so only the server's allocator differs.  Used by ./cidmalloc bench
# (bench/runner/programs.py, the "redis" row) and by tests/preload_test.sh
# (check_redis).
#
#   redis_session.sh gen DIR [N]     only write the commands (below)
#   redis_session.sh check DIR [N]   fill, churn during a BGSAVE, digest
#   redis_session.sh bench DIR [N]   the same, then redis-benchmark
# check and bench write the commands first unless DIR has them for N (the
# runner writes them once, untimed, with gen).
#
# The session, on a Unix socket in DIR (no TCP port to collide on):
#   1. fill: N keys (default 150000) of strings 8 B-64 KiB, plus hashes,
#      lists and sets, and APPENDs that grow strings in place (realloc),
#      sent with redis-cli --pipe from a file generated here (awk's LCG:
#      the same commands every time);
#   2. BGSAVE (a fork of the server, which allocates in the child while
#      the parent keeps serving), and meanwhile a churn that deletes a
#      third of the strings, pops lists, removes set members and hash
#      fields, and sets a sixth of the strings again at other sizes;
#   3. the RDB file of the fork checked with redis-check-rdb, and
#      DEBUG DIGEST of the data set (the same under every allocator);
#   4. bench only: redis-benchmark on database 1 (pipelined set, get,
#      incr, lpush, lpop, sadd, hset, spop), which the digest excludes;
#   5. SHUTDOWN NOSAVE; the server must exit with status 0.
# REDIS_BENCH_REQUESTS: requests per redis-benchmark test (100000).
# REDIS_SERVER_ARGS, if set, adds server options (split on spaces), e.g.
# "--io-threads 2 --io-threads-do-reads yes": I/O threads that read
# queries into buffers they grow, and write replies, beside the main
# thread.
# Prints "metric key=value" lines (the server's peak RSS from
# /proc/PID/status, Redis's used_memory and RSS at the end) and, on
# success, a last line "ok redis keys=K digest=HEX".  Exits 1 with a
# "FAIL: ..." line on stderr otherwise, 77 if no Redis binary is found.
set -uo pipefail

MODE="${1:-}"
DIR="${2:-}"
N="${3:-150000}"
if ! [[ "$MODE" =~ ^(gen|check|bench)$ && -n "$DIR" ]]; then
  echo "usage: redis_session.sh gen|check|bench DIR [N]" >&2
  exit 2
fi

fail() {
  echo "FAIL: $*" >&2
  [[ -s "$DIR/redis.log" ]] && tail -n 5 "$DIR/redis.log" >&2
  [[ -n "${SERVER:-}" ]] && kill -9 "$SERVER" 2>/dev/null
  exit 1
}

# Debian's redis-tools ships the server binary as redis-check-rdb, which
# runs as a server when its argv[0] names redis-server.
SERVER_BIN=""
for b in /usr/bin/redis-server /usr/bin/redis-check-rdb; do
  if [[ -x "$b" ]]; then SERVER_BIN="$b"; break; fi
done
if [[ "$MODE" != gen ]] && { [[ -z "$SERVER_BIN" ]] ||
  ! command -v redis-cli >/dev/null; }; then
  echo "skip: no redis server binary (Debian package redis-tools)"
  exit 77
fi

# The preload is the server's alone.
SERVER_PRELOAD="${LD_PRELOAD:-}"
unset LD_PRELOAD

mkdir -p "$DIR" || fail "cannot create $DIR"
SOCK="$DIR/redis.sock"
# A Unix socket's path has room for 107 bytes.
if ((${#SOCK} > 100)); then SOCK="/tmp/cidmalloc-redis.$$.sock"; fi
rm -f "$SOCK" "$DIR/dump.rdb" "$DIR/redis.log"

cli() { redis-cli -s "$SOCK" "$@"; }

# --- the commands (deterministic) --------------------------------------------

# gen PHASE N: RESP commands on stdout.  Values are slices of one text, of
# lengths from an LCG: mostly 8-263 bytes, every 50th key 1-5 KiB, every
# 2000th 16-80 KiB.
gen() {
  awk -v phase="$1" -v n="$2" '
    function cmd(a, k,   i, s) {
      s = "*" k "\r\n"
      for (i = 1; i <= k; i++) s = s "$" length(a[i]) "\r\n" a[i] "\r\n"
      printf "%s", s
    }
    function next_rand() { x = (x * 69069 + 1) % 4294967296; return x }
    function value(i, scale,   len) {
      len = 8 + next_rand() % 256
      if (i % 50 == 0) len = 1024 + next_rand() % 4096
      if (i % 2000 == 0) len = 16384 + next_rand() % 65536
      len = int(len * scale)
      if (len < 1) len = 1
      return substr(text, 1 + next_rand() % 1000, len)
    }
    BEGIN {
      x = (phase == "fill") ? 1 : 7
      text = ""
      while (length(text) < 90000) text = text "lorem-" length(text) "-ipsum "
      for (i = 1; i <= n; i++) {
        if (phase == "fill") {
          a[1] = "SET"; a[2] = "k:" i; a[3] = value(i, 1); cmd(a, 3)
          if (i % 3 == 0) {
            a[1] = "HSET"; a[2] = "h:" (i % 4000); a[3] = "f:" i
            a[4] = value(1, 0.25); cmd(a, 4)
          }
          if (i % 4 == 0) {
            a[1] = "RPUSH"; a[2] = "l:" (i % 1000); a[3] = value(1, 0.5)
            cmd(a, 3)
          }
          if (i % 5 == 0) {
            a[1] = "SADD"; a[2] = "s:" (i % 2000); a[3] = "m:" i; cmd(a, 3)
          }
          if (i % 7 == 0 && i > 3) {
            a[1] = "APPEND"; a[2] = "k:" (i - 3); a[3] = value(1, 1)
            cmd(a, 3)
          }
        } else {
          if (i % 3 == 0) { a[1] = "DEL"; a[2] = "k:" i; cmd(a, 2) }
          if (i % 6 == 0) {
            a[1] = "SET"; a[2] = "k:" i; a[3] = value(i + 1, 2); cmd(a, 3)
          }
          if (i % 8 == 0) { a[1] = "LPOP"; a[2] = "l:" (i % 1000); cmd(a, 2) }
          if (i % 9 == 0) {
            a[1] = "HDEL"; a[2] = "h:" (i % 4000); a[3] = "f:" i; cmd(a, 3)
          }
          if (i % 10 == 0) {
            a[1] = "SREM"; a[2] = "s:" (i % 2000); a[3] = "m:" i; cmd(a, 3)
          }
        }
      }
    }'
}

if [[ "$MODE" == gen || "$(cat "$DIR/commands.n" 2>/dev/null)" != "$N" ]]; then
  rm -f "$DIR/commands.n"
  gen fill "$N" >"$DIR/fill.resp" || fail "cannot write $DIR/fill.resp"
  gen churn "$N" >"$DIR/churn.resp" || fail "cannot write $DIR/churn.resp"
  echo "$N" >"$DIR/commands.n"
fi
[[ "$MODE" == gen ]] && exit 0

# --- the server --------------------------------------------------------------

read -r -a SERVER_ARGS <<<"${REDIS_SERVER_ARGS:-}"
(
  [[ -n "$SERVER_PRELOAD" ]] && export LD_PRELOAD="$SERVER_PRELOAD"
  exec -a redis-server "$SERVER_BIN" --port 0 --unixsocket "$SOCK" \
    --save "" --appendonly no --dir "$DIR" --logfile "$DIR/redis.log" \
    --enable-debug-command local --daemonize no \
    ${SERVER_ARGS[@]+"${SERVER_ARGS[@]}"}
) &
SERVER=$!
# A session that ends early (a failure, or timeout's SIGTERM) takes its
# server with it.
trap '[[ -n "${SERVER:-}" ]] && kill -9 "$SERVER" 2>/dev/null
  rm -f "$SOCK"' EXIT
trap 'exit 143' TERM INT

for _ in $(seq 200); do
  [[ -S "$SOCK" ]] && [[ "$(cli ping 2>/dev/null)" == PONG ]] && break
  kill -0 "$SERVER" 2>/dev/null || fail "the server exited at start"
  sleep 0.05
done
[[ "$(cli ping 2>/dev/null)" == PONG ]] || fail "the server did not start"

# pipe FILE: sends FILE's commands; fails unless Redis reports no error.
pipe() {
  local out
  out="$(cli --pipe <"$1" 2>&1)" ||
    fail "redis-cli --pipe $1: $out"
  [[ "$out" == *"errors: 0,"* ]] || fail "redis-cli --pipe $1: $out"
}

pipe "$DIR/fill.resp"
[[ "$(cli bgsave)" == "Background saving started" ]] || fail "BGSAVE refused"
pipe "$DIR/churn.resp"
# (Whole replies in variables: `cli ... | grep -q` would fail under
# pipefail whenever grep exits before redis-cli has written everything.)
for _ in $(seq 600); do
  info="$(cli info persistence)"
  [[ "$info" == *"rdb_bgsave_in_progress:0"* ]] && break
  sleep 0.05
done
[[ "$(cli info persistence)" == *"rdb_last_bgsave_status:ok"* ]] ||
  fail "BGSAVE did not succeed"
redis-check-rdb "$DIR/dump.rdb" >"$DIR/check-rdb.log" 2>&1 ||
  fail "redis-check-rdb: $(tail -n 3 "$DIR/check-rdb.log")"
grep -q "RDB looks OK" "$DIR/check-rdb.log" ||
  fail "redis-check-rdb: $(tail -n 3 "$DIR/check-rdb.log")"

KEYS="$(cli dbsize)"
DIGEST="$(cli debug digest)"
[[ "$DIGEST" =~ ^[0-9a-f]{40}$ ]] || fail "DEBUG DIGEST: $DIGEST"

if [[ "$MODE" == bench ]]; then
  redis-benchmark -s "$SOCK" --dbnum 1 -q -n "${REDIS_BENCH_REQUESTS:-100000}" \
    -r 100000 -d 128 -P 16 -c 8 -t set,get,incr,lpush,lpop,sadd,hset,spop \
    >"$DIR/benchmark.log" 2>&1 ||
    fail "redis-benchmark: $(tail -n 3 "$DIR/benchmark.log")"
  [[ "$(cli dbsize)" == "$KEYS" ]] || fail "redis-benchmark changed db 0"
fi

HWM_KB="$(awk '/^VmHWM:/ { print $2 }' "/proc/$SERVER/status")"
MEM="$(cli info memory | tr -d '\r')"
echo "metric server_hwm_kb=$HWM_KB"
echo "metric used_memory=$(sed -n 's/^used_memory://p' <<<"$MEM")"
echo "metric used_memory_rss=$(sed -n 's/^used_memory_rss://p' <<<"$MEM")"
STATS="$(cli info stats | tr -d '\r')"
for field in io_threaded_reads_processed io_threaded_writes_processed; do
  echo "metric $field=$(sed -n "s/^$field://p" <<<"$STATS")"
done

cli shutdown nosave >/dev/null 2>&1
wait "$SERVER"
rc=$?
SERVER=""
((rc == 0)) || fail "the server exited with status $rc"
echo "ok redis keys=$KEYS digest=$DIGEST"
