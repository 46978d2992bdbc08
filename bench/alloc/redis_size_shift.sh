#!/bin/bash
# Resident set of a redis server whose values change size: 200,000 keys set
# 300,000 times at each of the value sizes below (redis-benchmark, random
# keys), then 5 s idle.  Prints, per pass, the SET rate, redis's used_memory
# and the server's RSS, then the RSS after the idle time.  Each pass frees
# the previous size's values as it replaces them, which leaves that size's
# spans sparse (docs/design.md, "Idle caches", part 3).
#
#   bench/alloc/redis_size_shift.sh [VAR=VALUE...]
#   e.g. bench/alloc/redis_size_shift.sh LD_PRELOAD=bazel-bin/libcidmalloc.so \
#          CIDMALLOC_BACKGROUND_THREAD=on
#
# Needs redis-server and redis-benchmark (Debian's redis-server and
# redis-tools).  Port 26380 by default ($PORT).
set -eu
port=${PORT:-26380}
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
env "$@" redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" \
  --io-threads 2 --io-threads-do-reads yes >"$dir/server.out" 2>"$dir/server.err" &
server=$!
for _ in $(seq 50); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
rss_kb() { ps -o rss= -p "$server" | tr -d ' '; }
for size in 100 3000 500 1500 20 4000 800 3000 100; do
  rate=$(redis-benchmark -p "$port" -q -t set -n 300000 -r 200000 -d "$size" \
           -P 16 -c 20 2>&1 | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1)
  used=$(redis-cli -p "$port" info memory | tr -d '\r' | sed -n 's/^used_memory://p')
  echo "value size $size: SET $rate, used_memory $used, rss_kb $(rss_kb)"
done
sleep 5
echo "after 5 s idle: rss_kb $(rss_kb)"
