#!/usr/bin/env bash
# The Redis server the store's tests and benchmarks share (see scripts/lib/servers.sh).
#
#   redis.sh start DIR   start redis-server on 127.0.0.1, on a free port of its own, with its data
#                        in DIR/redis (appendonly yes, appendfsync always, maxmemory-policy
#                        noeviction: how idem::redis_store should be run), daemonized with a
#                        pidfile; then write DIR/redis.env (IDEM_TEST_REDIS_HOST/PORT).
#   redis.sh stop DIR    stop it; safe to call twice, or after a start that failed halfway.
#
# Tests that kill or reconfigure a server start their own; this one is never killed by them.
set -euo pipefail

command_name="${1:-}"
dir="${2:-}"
if [[ -z "$command_name" || -z "$dir" ]]; then
  echo "usage: redis.sh start|stop DIR" >&2
  exit 2
fi
data="$dir/redis"
pidfile="$data/redis.pid"

server_binary() {
  command -v redis-server 2>/dev/null && return
  local candidate
  for candidate in /usr/bin/redis-server /usr/sbin/redis-server; do
    [[ -x "$candidate" ]] && { echo "$candidate"; return; }
  done
  echo "redis.sh: redis-server is not installed (Debian: apt-get install redis-server)" >&2
  return 1
}

free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

stop() {
  [[ -f "$pidfile" ]] || return 0
  local pid
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

start() {
  local binary port attempt
  binary="$(server_binary)"
  mkdir -p "$data"
  stop  # a half-started earlier one
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    cat >"$data/redis.conf" <<CONF
bind 127.0.0.1
protected-mode yes
port $port
dir $data
daemonize yes
pidfile $pidfile
logfile $data/redis.log
appendonly yes
appendfsync always
save ""
maxmemory-policy noeviction
CONF
    "$binary" "$data/redis.conf" || true
    for _ in $(seq 1 100); do
      if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null || true)" == PONG ]]; then
        {
          echo "export IDEM_TEST_REDIS_HOST=127.0.0.1"
          echo "export IDEM_TEST_REDIS_PORT=$port"
        } >"$dir/redis.env"
        echo "redis-server listening on 127.0.0.1:$port (data in $data)"
        return 0
      fi
      sleep 0.1
    done
    echo "redis.sh: redis-server did not start on port $port (attempt $attempt); log:" >&2
    tail -n 20 "$data/redis.log" >&2 2>/dev/null || true
    stop
  done
  return 1
}

case "$command_name" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: redis.sh start|stop DIR" >&2
    exit 2
    ;;
esac
