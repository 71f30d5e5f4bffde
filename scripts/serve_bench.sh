#!/usr/bin/env bash
# The payments server, blocking and --async, under the same load: issue #31's server benchmark.
#
#   scripts/serve_bench.sh [options]
#
#   --stores "sqlite postgres"   the stores to run the server on, in order (default both)
#   --concurrency N              intents in flight at once (default 256)
#   --duration-s S               seconds measured per server (default 10), after
#   --warmup-s S                 seconds of the same load, not counted (default 2)
#   --latency-ms N               the processor's latency per charge (default 50)
#   --processor-threads N        the processor's threads: requests it serves at once (default
#                                1024, well above --concurrency; see below)
#   --async-threads N            payments_server --async --threads N (default: the server's own)
#   --bin DIR                    use the programs in DIR instead of building them
#
# It builds payments_processor, payments_server and payments_chaos (Release, build/serve-bench),
# starts a PostgreSQL server (scripts/servers/postgres.sh) and the processor in a temporary
# folder on ports of their own, and stops them when it exits. Then:
#   1. the processor alone: payments_chaos --mode bench POSTs /v1/charges to it at the same
#      concurrency, to show its ceiling (at most concurrency / latency per second: 256 / 50 ms is
#      5,120; its SQLite commits, made without fsync here (--synchronous normal), and the CPU
#      this machine has left bring it below that): it must sit well above the servers' rates;
#   2. for each store, payments_server without and then with --async (each on a fresh database),
#      driven by payments_chaos --mode bench: --concurrency clients, each sending one intent after
#      another under a fresh key, once, over a new connection (no faults);
# and prints one line per store:
#   STORE async N/s p99 X ms | blocking M/s p99 Y ms | ratio R
# (R = N / M). A payments_server without --async gets "async n/a" and "ratio n/a".
# Everything runs on this machine: the client, the processor and the database share its cores
# with the server measured, as they would on a developer's laptop.
set -euo pipefail

usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

stores="sqlite postgres"
concurrency=256
duration_s=10
warmup_s=2
latency_ms=50
processor_threads=1024
async_threads=""
bin=""
while (($#)); do
  case "$1" in
    --stores) stores="${2:?--stores needs a list}"; shift ;;
    --concurrency) concurrency="${2:?--concurrency needs a number}"; shift ;;
    --duration-s) duration_s="${2:?--duration-s needs a number}"; shift ;;
    --warmup-s) warmup_s="${2:?--warmup-s needs a number}"; shift ;;
    --latency-ms) latency_ms="${2:?--latency-ms needs a number}"; shift ;;
    --processor-threads) processor_threads="${2:?--processor-threads needs a number}"; shift ;;
    --async-threads) async_threads="${2:?--async-threads needs a number}"; shift ;;
    --bin) bin="${2:?--bin needs a directory}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/serve_bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
for store in $stores; do
  [[ "$store" == sqlite || "$store" == postgres ]] || {
    echo "scripts/serve_bench.sh: a store is sqlite or postgres, not '$store'" >&2
    exit 2
  }
done

# shellcheck disable=SC1091
source "$root/scripts/lib/packages.sh"
if [[ -z "$bin" ]]; then
  configuration=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DIDEM_BUILD_EXAMPLES=ON -DIDEM_BUILD_TESTS=OFF
    -DIDEM_BUILD_BENCH=OFF -DIDEM_SANITIZE= -DIDEM_REQUIRE_ADAPTERS=ON)
  idem_configure_uses "${configuration[@]}"
  idem_install scripts/serve_bench.sh build adapters examples servers
  echo "== building the payments programs in build/serve-bench" >&2
  cmake -S "$root" -B "$root/build/serve-bench" -G Ninja "${configuration[@]}" \
    $(idem_compiler_launcher) >/dev/null
  cmake --build "$root/build/serve-bench" --target payments_processor payments_server \
    payments_chaos >&2
  bin="$root/build/serve-bench/examples/payments"
else
  idem_install scripts/serve_bench.sh servers
fi
bin="$(cd "$bin" && pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/idem-serve-bench.$(printf 'X%.0s' 1 2 3 4 5 6)")"
chmod 755 "$work"  # PostgreSQL, started as its own user, keeps its data in here
pids=()
postgres_started=0

stop_all() {
  local pid
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
    echo "logs kept in $work" >&2
  else
    rm -rf "$work"
  fi
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Each client and each server thread holds a connection: room for them all.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# The port a program printed ("NAME: listening on PORT") into its log.
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
  echo "scripts/serve_bench.sh: $(basename "$log" .log) did not start; its log:" >&2
  cat "$log" >&2
  return 1
}

# Starts a program in the background, its output in $work/NAME.log; sets $started_pid.
start() {
  local name="$1"
  shift
  "$@" >"$work/$name.log" 2>&1 &
  started_pid=$!
  pids+=("$started_pid")
}

stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Drives URL (ROUTE) with payments_chaos --mode bench; prints its "bench: ..." line.
drive() {
  local url="$1" route="$2" line
  line="$("$bin/payments_chaos" --mode bench --servers "$url" --path "$route" \
    --concurrency "$concurrency" --duration-s "$duration_s" --warmup-s "$warmup_s" \
    --accounts 64 | grep '^bench: ' || true)"
  if [[ -z "$line" ]]; then
    echo "scripts/serve_bench.sh: payments_chaos printed no result for $url" >&2
    return 1
  fi
  echo "$line"
}
rate_of() { sed -n 's/^bench: \([0-9.]*\)\/s .*/\1/p' <<<"$1"; }
p99_of() { sed -n 's/^bench: .* p99 \([0-9.]*\) ms .*/\1/p' <<<"$1"; }

if [[ " $stores " == *" postgres "* ]]; then
  echo "== starting postgres" >&2
  postgres_started=1
  bash "$root/scripts/servers/postgres.sh" start "$work" >/dev/null ||
    { echo "scripts/serve_bench.sh: PostgreSQL did not start" >&2; exit 1; }
  # shellcheck disable=SC1091
  source "$work/postgres.env"
fi

start processor "$bin/payments_processor" --port 0 --db "$work/processor.sqlite3" \
  --latency-ms "$latency_ms" --threads "$processor_threads" --synchronous normal
processor_pid=$started_pid
processor_port="$(wait_listening "$work/processor.log")"
processor_url="http://127.0.0.1:$processor_port"

have_async=0
if "$bin/payments_server" --help 2>/dev/null | grep -q -- '--async'; then
  have_async=1
fi

echo "== the processor alone: $concurrency in flight, $latency_ms ms a charge," \
  "$processor_threads threads" >&2
processor_line="$(drive "$processor_url" /v1/charges)"
echo "processor alone: $processor_line"

# One server: STORE MODE; prints its "bench: ..." line.
serve() {
  local store="$1" mode="$2" spec port line flags=()
  case "$store" in
    sqlite) spec="sqlite:$work/server-$mode.sqlite3" ;;
    postgres) spec="postgres:$IDEM_TEST_PG_CONNINFO dbname=serve_$mode" ;;
  esac
  if [[ "$mode" == async ]]; then
    flags+=(--async)
    [[ -z "$async_threads" ]] || flags+=(--threads "$async_threads")
  fi
  echo "== payments_server ${flags[*]} on $store" >&2
  start "server-$store-$mode" "$bin/payments_server" --port 0 --processor "$processor_url" \
    --store "$spec" "${flags[@]}"
  local pid=$started_pid
  port="$(wait_listening "$work/server-$store-$mode.log")"
  line="$(drive "http://127.0.0.1:$port" /v1/payments)" || { stop "$pid"; return 1; }
  stop "$pid"
  echo "$line"
}

if [[ " $stores " == *" postgres "* ]]; then
  # A database per server, so that each starts empty.
  for mode in blocking async; do
    psql "$IDEM_TEST_PG_CONNINFO" -qc "CREATE DATABASE serve_$mode" >/dev/null
  done
fi

results=()
for store in $stores; do
  blocking="$(serve "$store" blocking)"
  echo "$store blocking: $blocking"
  b_rate="$(rate_of "$blocking")"
  b_p99="$(p99_of "$blocking")"
  if ((have_async)); then
    async="$(serve "$store" async)"
    echo "$store async: $async"
    a_rate="$(rate_of "$async")"
    a_p99="$(p99_of "$async")"
    ratio="$(python3 -c "import sys; b = float(sys.argv[2]); print(f'{float(sys.argv[1]) / b:.2f}' if b else 'inf')" "$a_rate" "$b_rate")"
    results+=("$store async $a_rate/s p99 $a_p99 ms | blocking $b_rate/s p99 $b_p99 ms | ratio $ratio")
  else
    results+=("$store async n/a (payments_server has no --async) | blocking $b_rate/s p99 $b_p99 ms | ratio n/a")
  fi
done
stop "$processor_pid"

echo
echo "== $concurrency intents in flight, processor latency $latency_ms ms, $duration_s s measured" \
  "after $warmup_s s, $(nproc) cores"
printf '%s\n' "${results[@]}"
