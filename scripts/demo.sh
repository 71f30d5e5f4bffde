#!/usr/bin/env bash
# The payments demo: a payment is charged exactly once however often its request is repeated or
# its server dies. Real processes, real HTTP, real crashes (examples/payments/).
#
#   scripts/demo.sh                      processor + two servers sharing one SQLite file, faults
#                                        on, ~1,000 intents from the chaos client, its report
#   scripts/demo.sh --store postgres     the same, both servers sharing one PostgreSQL (started
#                                        here, as the test script starts it)
#   scripts/demo.sh --intents N --concurrency C --seed S
#                                        a bigger or smaller run, or a reproducible one
#   scripts/demo.sh server ARGS...       build if needed and run one program with ARGS
#   scripts/demo.sh processor ARGS...    (--help lists each program's options)
#   scripts/demo.sh chaos ARGS...
#
# Installs what is missing (Debian packages), builds in build/demo (Release), and stops every
# process it started however it exits. --bin DIR uses programs already built in DIR instead
# (the test suite runs the scenario this way). Exits with the chaos client's status: 0 when
# every intent was charged exactly once.
set -euo pipefail

usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
user_dir="$PWD"

# --- arguments -------------------------------------------------------------------------------
program=""
store=sqlite
intents=1000
concurrency=8
seed=""
bin=""
case "${1:-}" in
  server | processor | chaos) program="$1"; shift ;;
esac
if [[ -z "$program" ]]; then
  while (($#)); do
    case "$1" in
      --store) store="${2:?--store needs sqlite or postgres}"; shift ;;
      --intents) intents="${2:?--intents needs a number}"; shift ;;
      --concurrency) concurrency="${2:?--concurrency needs a number}"; shift ;;
      --seed) seed="${2:?--seed needs a number}"; shift ;;
      --bin) bin="${2:?--bin needs a directory}"; shift ;;
      -h | --help) usage; exit 0 ;;
      *) echo "scripts/demo.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
  done
  [[ "$store" == sqlite || "$store" == postgres ]] || {
    echo "scripts/demo.sh: --store is sqlite or postgres, not '$store'" >&2
    exit 2
  }
fi

# --- packages and build ----------------------------------------------------------------------
source "$root/scripts/lib/packages.sh"

if [[ -z "$bin" ]]; then
  packages=(g++ cmake ninja-build pkg-config python3 libsqlite3-dev libpq-dev libhiredis-dev
    libcpp-httplib-dev nlohmann-json3-dev)
  [[ "$store" != postgres ]] || packages+=(postgresql)
  idem_ensure_packages scripts/demo.sh "${packages[@]}"
  echo "== building the demo in build/demo" >&2
  cmake -S "$root" -B "$root/build/demo" -G Ninja -DCMAKE_CXX_COMPILER=g++ \
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
    -DIDEM_BUILD_EXAMPLES=ON -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_BENCH=OFF -DIDEM_SANITIZE= \
    -DIDEM_REQUIRE_ADAPTERS=ON >/dev/null
  cmake --build "$root/build/demo" --target payments_processor payments_server payments_chaos \
    >&2
  bin="$root/build/demo/examples/payments"
fi
bin="$(cd "$bin" && pwd)"

if [[ -n "$program" ]]; then
  cd "$user_dir"
  exec "$bin/payments_$program" "$@"
fi

# --- the scenario ----------------------------------------------------------------------------
# mktemp fills in the template's trailing X characters (six of them here).
work="$(mktemp -d "${TMPDIR:-/tmp}/idem-demo.$(printf 'X%.0s' 1 2 3 4 5 6)")"
chmod 755 "$work"  # PostgreSQL, started as its own user, keeps its data in here
pids=()
postgres_started=0

stop_all() {
  touch "$work/stopping"
  local pid file
  for file in "$work"/*.pid; do
    [[ -e "$file" ]] && kill "$(cat "$file")" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if ((postgres_started)); then
    bash "$root/scripts/servers/postgres.sh" stop "$work" >/dev/null 2>&1 || true
  fi
  if [[ -n "${keep_logs:-}" ]]; then
    echo "logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ulimit -c 0  # the crashes are on purpose: no core files

# wait_listening LOG: the port a program printed ("...: listening on N"), once it has.
wait_listening() {
  local log="$1" i port
  for ((i = 0; i < 300; i++)); do
    port="$(sed -n 's/.*: listening on \([0-9][0-9]*\)$/\1/p' "$log" 2>/dev/null | tail -n 1)"
    if [[ -n "$port" ]]; then
      echo "$port"
      return 0
    fi
    sleep 0.1
  done
  echo "scripts/demo.sh: $(basename "$log" .log) did not start; its log:" >&2
  cat "$log" >&2
  return 1
}

# supervise NAME ARGS...: runs payments_server with ARGS, restarting it on the same port
# whenever it dies (the crashes --crash-after-charge makes), until the scenario ends.
supervise() {
  local name="$1" port=0 restarts=0
  shift
  while [[ ! -e "$work/stopping" ]]; do
    "$bin/payments_server" --port "$port" "$@" >>"$work/$name.log" 2>&1 &
    echo $! >"$work/$name.pid"
    wait $! 2>/dev/null || true
    [[ ! -e "$work/stopping" ]] || break
    restarts=$((restarts + 1))
    echo "$restarts" >"$work/$name.restarts"
    ((port != 0)) || port="$(wait_listening "$work/$name.log")"
  done
}

case "$store" in
  sqlite) store_spec="sqlite:$work/payments.sqlite3" ;;
  postgres)
    postgres_started=1
    echo "== starting PostgreSQL"
    bash "$root/scripts/servers/postgres.sh" start "$work" >/dev/null
    # shellcheck disable=SC1091
    source "$work/postgres.env"
    store_spec="postgres:$IDEM_TEST_PG_CONNINFO"
    ;;
esac

fail_rate=0.1
crash_rate=0.02
drop_rate=0.05
lease_ms=1000

"$bin/payments_processor" --port 0 --db "$work/processor.sqlite3" --fail-rate "$fail_rate" \
  --latency-ms 2 >"$work/processor.log" 2>&1 &
pids+=($!)
processor_port="$(wait_listening "$work/processor.log")"
processor="http://127.0.0.1:$processor_port"

servers=()
for name in server-a server-b; do
  supervise "$name" --processor "$processor" --store "$store_spec" --lease-ms "$lease_ms" \
    --crash-after-charge "$crash_rate" 2>/dev/null &
  pids+=($!)
done
for name in server-a server-b; do
  servers+=("http://127.0.0.1:$(wait_listening "$work/$name.log")")
done

echo "== processor $processor (503 before charging: $fail_rate)"
echo "== servers ${servers[*]} on $store (crash after charging: $crash_rate, lease ${lease_ms} ms)"
echo "== chaos client: $intents intents, concurrency $concurrency, dropped connections: $drop_rate"
# In the background, waited for: a signal to this script then stops everything at once.
"$bin/payments_chaos" --servers "$(
  IFS=,
  echo "${servers[*]}"
)" --processor "$processor" --intents "$intents" --concurrency "$concurrency" \
  --drop-rate "$drop_rate" ${seed:+--seed "$seed"} &
pids+=($!)
status=0
wait $! || status=$?
restarts=0
for name in server-a server-b; do
  [[ ! -e "$work/$name.restarts" ]] || restarts=$((restarts + $(cat "$work/$name.restarts")))
done
echo "server crashes       $restarts (each restarted by the supervisor on its port)"
((status == 0)) || keep_logs=1
exit "$status"
