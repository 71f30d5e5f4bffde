#!/usr/bin/env bash
# A replicated PostgreSQL pair for the postgres store's failover tests: a primary and a streaming
# standby on loopback, with synchronous commit on (the recipe of docs/stores/postgres.md).
#
#   postgres-replicated.sh start DIR     initdb the primary under DIR/postgres-replicated/primary,
#                                        start it on a free port, copy it with pg_basebackup into
#                                        .../standby, start that as its streaming standby
#                                        (application_name idem_standby, which the primary's
#                                        synchronous_standby_names names), wait until it streams
#                                        as the synchronous standby, and write
#                                        DIR/postgres-replicated.env:
#       IDEM_TEST_PG_REPLICATED_CONNINFO  both hosts, the standby first, with
#                                         target_session_attrs=read-write: libpq skips the
#                                         standby and finds whichever is the primary
#       IDEM_TEST_PG_PRIMARY_CONNINFO, IDEM_TEST_PG_STANDBY_CONNINFO   each node alone
#       IDEM_TEST_PG_REPLICATED_DIR       DIR
#   postgres-replicated.sh stop DIR      stop both at once (-m immediate) and kill what they left;
#                                        safe twice, or after a start that failed halfway.
#
# What the failover tests do to it, each node by name (primary or standby):
#   postgres-replicated.sh crash NODE DIR    kill -9 the node's postmaster and every child of it
#                                            at once (stopped first, so none outlives the others)
#   postgres-replicated.sh restart NODE DIR  start a crashed node again on its data and port
#   postgres-replicated.sh promote NODE DIR  pg_ctl promote: the standby becomes a primary
#
# It is not in scripts/servers/, whose every script scripts/test.sh and scripts/bench.sh start
# for the whole run: each failover test kills its pair, so each starts one of its own.
#
# PostgreSQL refuses to run as root: as root, the servers run as the unprivileged `postgres`
# user the Debian package creates (or `idem-pg`, created when there is neither), as in
# scripts/servers/postgres.sh. fsync stays on.
set -euo pipefail

command="${1:-}"
node=""
case "$command" in
  crash | restart | promote)
    node="${2:-}"
    [[ "$node" == primary || "$node" == standby ]] ||
      { echo "postgres-replicated.sh: $command wants primary or standby" >&2; exit 2; }
    shift
    ;;
esac
dir="${2:-}"
[[ -n "$command" && -n "$dir" ]] ||
  { echo "usage: postgres-replicated.sh start|stop DIR, or crash|restart|promote NODE DIR" >&2; exit 2; }
dir="$(cd "$dir" && pwd)"
home="$dir/postgres-replicated"

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

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# kill -9 a node: its postmaster and its children, all stopped first so that none sees another
# die (a backend that outlived its postmaster could still answer a client).
crash() {
  local data="$home/$1/data" pid
  [[ -f "$data/postmaster.pid" ]] || return 0
  pid="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
    kill -STOP "$pid" 2>/dev/null || true
    pkill -STOP -P "$pid" 2>/dev/null || true
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
    # Reaped by init, not by this shell: wait until it is gone (a restart on this data refuses
    # while the pid in postmaster.pid is alive, zombie or not). A killed process is torn down and
    # reaped by the kernel and init alone, with nothing of ours to wait for: 10 s, then say so.
    local tries=0
    while kill -0 "$pid" 2>/dev/null; do
      ((tries++ < 200)) || {
        echo "postgres-replicated.sh: the $1's postmaster $pid outlived kill -9 by 10 s" \
          "(state $(ps -o stat= -p "$pid" 2>/dev/null || echo gone))" >&2
        return 1
      }
      sleep 0.05
    done
  fi
}

stop_node() {
  local data="$home/$1/data"
  [[ -d "$data" ]] || return 0
  if [[ -x "$bin/pg_ctl" && -f "$data/postmaster.pid" ]]; then
    "${run_as[@]}" "$bin/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  crash "$1"
  rm -f "$data/postmaster.pid"
}

stop() {
  [[ -d "$home" ]] || return 0
  stop_node standby
  stop_node primary
}

# pg_ctl -w's patience (start, promote), in seconds: it stops waiting as soon as the postmaster
# exits, so the bound only ends a server that is alive and still starting (a crash recovery
# replaying WAL on a loaded machine): a ceiling, not a guess at the machine's speed.
pg_ctl_patience=300

# Starts a node on its data and port; the settings are the command line's, so a restart or a
# promotion keeps them.
start_node() {
  local name="$1" port
  port="$(cat "$home/$name/port")"
  ((EUID != 0)) || chown -R "$user" "$home/$name"
  # synchronous_standby_names is the primary's alone (its postgresql.auto.conf, set after the
  # copy): a promoted standby has no standby of its own and must not wait for one.
  "${run_as[@]}" "$bin/pg_ctl" -D "$home/$name/data" -l "$home/$name/server.log" -w -t "$pg_ctl_patience" \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$home/$name \
        -c max_connections=100 -c shared_buffers=32MB -c fsync=on -c wal_level=replica \
        -c max_wal_senders=4 -c wal_keep_size=64MB -c hot_standby=on \
        -c synchronous_commit=on -c wal_receiver_status_interval=1s" \
    start >/dev/null || { tail -n 30 "$home/$name/server.log" >&2; exit 1; }
}

sql() {  # sql NODE DATABASE QUERY
  "${run_as[@]}" "$bin/psql" -h 127.0.0.1 -p "$(cat "$home/$1/port")" -U idem -d "$2" -tAc "$3"
}

start() {
  [[ -x "$bin/initdb" && -x "$bin/pg_basebackup" ]] ||
    { echo "postgres-replicated.sh: no PostgreSQL server binaries found" >&2; exit 1; }
  stop
  rm -rf "$home"
  mkdir -p "$home/primary/data" "$home/standby"
  chmod 755 "$dir" "$home"
  ((EUID != 0)) || chown -R "$user" "$home"
  "${run_as[@]}" "$bin/initdb" -D "$home/primary/data" -U idem --auth=trust --no-instructions --no-sync \
    --encoding=UTF8 --locale=C >"$home/primary/initdb.log" 2>&1 ||
    { cat "$home/primary/initdb.log" >&2; exit 1; }
  free_port >"$home/primary/port"
  free_port >"$home/standby/port"
  start_node primary
  sql primary postgres "CREATE DATABASE idem" >/dev/null
  local primary_port standby_port
  primary_port="$(cat "$home/primary/port")"
  standby_port="$(cat "$home/standby/port")"
  "${run_as[@]}" "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U idem \
    -D "$home/standby/data" -X stream -c fast >"$home/standby/basebackup.log" 2>&1 ||
    { cat "$home/standby/basebackup.log" >&2; exit 1; }
  # A standby of the primary, under the name synchronous_standby_names gives.
  cat >>"$home/standby/data/postgresql.auto.conf" <<CONF
primary_conninfo = 'host=127.0.0.1 port=$primary_port user=idem application_name=idem_standby'
CONF
  touch "$home/standby/data/standby.signal"
  start_node standby
  # The recipe: from now on every commit waits until the standby named here has flushed it
  # (set once the standby exists: CREATE DATABASE above would have waited for it).
  sql primary postgres "ALTER SYSTEM SET synchronous_standby_names = 'idem_standby'" >/dev/null
  sql primary postgres "SELECT pg_reload_conf()" >/dev/null
  # The standby streams once its WAL receiver has connected and caught up; a receiver that
  # failed tries again every wal_retrieve_retry_interval (5 s). The wait goes on while what the
  # primary shows of it changes (startup, catchup, streaming; async, then sync after the reload),
  # and gives up after 30 s (six retries) without a change, saying what it saw.
  local seen="" last="" since=$SECONDS
  until [[ "$seen" == "streaming sync" ]]; do
    seen="$(sql primary postgres "SELECT coalesce(string_agg(state || ' ' || sync_state, ', '), \
      'no WAL sender') FROM pg_stat_replication WHERE application_name = 'idem_standby'" || echo "no answer")"
    [[ "$seen" == "$last" ]] || { last="$seen"; since=$SECONDS; }
    ((SECONDS - since < 30)) || {
      echo "postgres-replicated.sh: the standby never streamed as the synchronous standby;" \
        "for 30 s the primary showed: $seen" >&2
      exit 1
    }
    sleep 0.1
  done
  cat >"$dir/postgres-replicated.env" <<ENV
export IDEM_TEST_PG_REPLICATED_CONNINFO='host=127.0.0.1,127.0.0.1 port=$standby_port,$primary_port dbname=idem user=idem target_session_attrs=read-write'
export IDEM_TEST_PG_PRIMARY_CONNINFO='host=127.0.0.1 port=$primary_port dbname=idem user=idem'
export IDEM_TEST_PG_STANDBY_CONNINFO='host=127.0.0.1 port=$standby_port dbname=idem user=idem'
export IDEM_TEST_PG_REPLICATED_DIR='$dir'
ENV
}

case "$command" in
  start) start ;;
  stop) stop ;;
  crash) crash "$node" ;;
  restart) start_node "$node" ;;
  promote) "${run_as[@]}" "$bin/pg_ctl" -D "$home/$node/data" -w -t "$pg_ctl_patience" promote >/dev/null ;;
  *) echo "postgres-replicated.sh: unknown command '$command'" >&2; exit 2 ;;
esac
