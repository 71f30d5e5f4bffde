#!/usr/bin/env bash
# A private PostgreSQL server for the postgres store's tests and benchmarks.
#
#   postgres.sh start DIR   initdb under DIR/postgres (first time), start it on 127.0.0.1 on a
#                           free port of its own, socket in DIR/postgres, and write
#                           DIR/postgres.env (IDEM_TEST_PG_CONNINFO, IDEM_TEST_PG_DIR). A DIR
#                           that already holds a stopped server starts it again, same data, same
#                           port: that is how the restart test brings its server back.
#   postgres.sh stop DIR    stop it at once (-m immediate, what a crash looks like; the data
#                           stays) and kill anything it left; safe twice or after a failed start.
#
# PostgreSQL refuses to run as root: as root, the server runs as the unprivileged `postgres`
# user the Debian package creates (or `idem-pg`, created when there is neither).
# fsync stays on: durability across a restart is part of what the tests check.
set -euo pipefail

command="${1:-}"
dir="${2:-}"
[[ -n "$command" && -n "$dir" ]] || { echo "usage: postgres.sh start|stop DIR" >&2; exit 2; }
dir="$(cd "$dir" && pwd)"
home="$dir/postgres"
data="$home/data"

bin=""
for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
  [[ -x "$candidate/pg_ctl" ]] && { bin="$candidate"; break; }
done
[[ -n "$bin" ]] || bin="$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/pg_ctl)")"

run_as=()
if ((EUID == 0)); then
  user=postgres
  if ! id -u "$user" >/dev/null 2>&1; then
    user=idem-pg
    id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  fi
  run_as=(runuser -u "$user" --)
fi

stop() {
  [[ -d "$home" ]] || return 0
  if [[ -x "$bin/pg_ctl" && -f "$data/postmaster.pid" ]]; then
    "${run_as[@]}" "$bin/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  # Whatever survived (a postmaster that did not answer, its children): by the pid it wrote.
  if [[ -f "$data/postmaster.pid" ]]; then
    local pid
    pid="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      pkill -KILL -P "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$data/postmaster.pid"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  [[ -x "$bin/initdb" ]] || { echo "postgres.sh: no PostgreSQL server binaries found" >&2; exit 1; }
  mkdir -p "$home"
  chmod 755 "$dir"
  if [[ ! -f "$data/PG_VERSION" ]]; then
    rm -rf "$data"
    mkdir -p "$data"
    ((EUID != 0)) || chown -R "$user" "$home"
    "${run_as[@]}" "$bin/initdb" -D "$data" -U idem --auth=trust --no-instructions \
      --encoding=UTF8 --locale=C >"$home/initdb.log" 2>&1 ||
      { cat "$home/initdb.log" >&2; exit 1; }
    free_port >"$home/port"
  fi
  ((EUID != 0)) || chown -R "$user" "$home"
  local port
  port="$(cat "$home/port")"
  # Loopback and the private socket only; room for several builds' 64-connection storms.
  "${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$home/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$home \
        -c max_connections=300 -c shared_buffers=64MB -c fsync=on \
        -c max_locks_per_transaction=128 -c max_pred_locks_per_transaction=256" \
    start >/dev/null || { tail -n 30 "$home/server.log" >&2; exit 1; }
  if ! "${run_as[@]}" "$bin/psql" -h 127.0.0.1 -p "$port" -U idem -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'idem'" | grep -q 1; then
    "${run_as[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U idem idem
  fi
  cat >"$dir/postgres.env" <<ENV
export IDEM_TEST_PG_CONNINFO='host=127.0.0.1 port=$port dbname=idem user=idem'
export IDEM_TEST_PG_DIR='$dir'
ENV
}

case "$command" in
  start) start ;;
  stop) stop ;;
  *) echo "postgres.sh: unknown command '$command' (start or stop)" >&2; exit 2 ;;
esac
