#!/usr/bin/env bash
# The payments server, blocking and --async, under the same load: issue #31's server benchmark;
# and beside each, its floor (issue #51): the same API with its idempotency written by hand.
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
#   --floor FILE                 the floor server (default: built, bench/serve; with --bin:
#                                DIR/payments_floor_server when it is there, else none)
#   --no-floor                   run idem's servers only, as before issue #51
#   --perf DIR                   record each server's measured window with perf (call graphs)
#                                into DIR/STORE-KIND-MODE.data; perf takes CPU of its own, so
#                                the figures of such a run are not comparable with others
#
# It builds payments_processor, payments_server, payments_chaos and payments_floor_server
# (Release, build/serve-bench),
# starts a PostgreSQL server (scripts/servers/postgres.sh) and the processor in a temporary
# folder on ports of their own, and stops them when it exits. Then:
#   1. the processor alone: payments_chaos --mode bench POSTs /v1/charges to it at the same
#      concurrency, to show its ceiling (at most concurrency / latency per second: 256 / 50 ms is
#      5,120; its SQLite commits, made without fsync here (--synchronous normal), and the CPU
#      this machine has left bring it below that): it must sit well above the servers' rates;
#   2. for each store, payments_server without and then with --async, then the floor server
#      (bench/serve/payments_floor_server: the same routes, HTTP servers and processor client,
#      its idempotency by hand: a claim INSERT ... ON CONFLICT DO NOTHING, the charge, one
#      completing transaction) without and with --async, each on a fresh database, driven by
#      payments_chaos --mode bench: --concurrency clients, each sending one intent after another
#      under a fresh key, once, over a new connection (no faults). Each server's CPU (user +
#      sys, /proc/PID/stat) is read at the start and the end of the measured window;
# and prints one line per store, as before issue #51:
#   STORE async N/s p99 X ms | blocking M/s p99 Y ms | ratio R
# (R = N / M; a payments_server without --async gets "async n/a" and "ratio n/a"), the processor
# alone, then idem beside its floor, one line per store and server kind:
#   STORE idem KIND N/s p50 A p99 B ms cpu C µs/intent | floor KIND ... | idem/floor T× intents/s, U× cpu/intent
# (KIND async or blocking; T = idem's intents/s over the floor's, U = idem's server CPU per
# intent over the floor's; issue #51's goals: T ≥ 0.90 and U ≤ 1.15).
# Everything runs on this machine: the client, the processor and the database share its cores
# with the server measured, as they would on a developer's laptop.
set -euo pipefail

usage() { sed -n '2,46p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

stores="sqlite postgres"
concurrency=256
duration_s=10
warmup_s=2
latency_ms=50
processor_threads=1024
async_threads=""
bin=""
floor=""
floor_wanted=1
perf_dir=""
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
    --floor) floor="${2:?--floor needs a file}"; shift ;;
    --no-floor) floor_wanted=0 ;;
    --perf) perf_dir="${2:?--perf needs a directory}"; shift ;;
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
  # IDEM_BUILD_BENCH for the floor server (bench/serve); only the targets below are built.
  configuration=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DIDEM_BUILD_EXAMPLES=ON -DIDEM_BUILD_TESTS=OFF
    -DIDEM_BUILD_BENCH=ON -DIDEM_SANITIZE= -DIDEM_REQUIRE_ADAPTERS=ON)
  idem_configure_uses "${configuration[@]}"
  idem_install scripts/serve_bench.sh build adapters examples servers bench
  echo "== building the payments programs in build/serve-bench" >&2
  cmake -S "$root" -B "$root/build/serve-bench" -G Ninja "${configuration[@]}" \
    $(idem_compiler_launcher) >/dev/null
  targets=(payments_processor payments_server payments_chaos)
  ((floor_wanted)) && [[ -z "$floor" ]] && targets+=(payments_floor_server)
  cmake --build "$root/build/serve-bench" --target "${targets[@]}" >&2
  bin="$root/build/serve-bench/examples/payments"
  [[ -n "$floor" ]] || floor="$root/build/serve-bench/bench/serve/payments_floor_server"
else
  idem_install scripts/serve_bench.sh servers
fi
bin="$(cd "$bin" && pwd)"
[[ -n "$floor" || ! -x "$bin/payments_floor_server" ]] || floor="$bin/payments_floor_server"
((floor_wanted)) || floor=""
if [[ -n "$floor" && ! -x "$floor" ]]; then
  echo "scripts/serve_bench.sh: no floor server at $floor" >&2
  exit 2
fi
if [[ -n "$perf_dir" ]]; then
  command -v perf >/dev/null || { echo "scripts/serve_bench.sh: --perf needs perf" >&2; exit 2; }
  mkdir -p "$perf_dir"
  perf_dir="$(cd "$perf_dir" && pwd)"
fi

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
p50_of() { sed -n 's/^bench: .* p50 \([0-9.]*\) ms .*/\1/p' <<<"$1"; }
answered_of() { sed -n 's/^bench: .*(\([0-9]*\) answered 201 .*/\1/p' <<<"$1"; }

# A process's CPU so far, user + sys, in clock ticks (/proc/PID/stat fields 14 and 15; the
# command's name, field 2, may hold spaces, so the fields are counted after its ')').
cpu_ticks() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
  stat="${stat##*) }"
  awk '{ print $12 + $13 }' <<<"$stat"
}
ticks_per_second="$(getconf CLK_TCK)"

# In the background, beside drive: PID's CPU ticks spent in the measured window (from warmup_s
# to warmup_s + duration_s after now), into FILE; with --perf, perf records the window into
# PERF_FILE.
cpu_window() {
  local pid="$1" file="$2" perf_file="${3:-}" before after
  sleep "$warmup_s"
  before="$(cpu_ticks "$pid")"
  if [[ -n "$perf_file" ]]; then
    perf record -g -q -p "$pid" -o "$perf_file" -- sleep "$duration_s" >/dev/null 2>&1 || true
  else
    sleep "$duration_s"
  fi
  after="$(cpu_ticks "$pid")"
  echo $((after - before)) >"$file"
}

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

# One server: STORE MODE [KIND]; KIND idem (payments_server, the default) or floor
# (payments_floor_server). Prints its "bench: ..." line, then "cpu: TICKS" (its CPU in the
# measured window).
serve() {
  local store="$1" mode="$2" kind="${3:-idem}" spec port line flags=() program name database
  name="server-$store-$mode"
  database="serve_$mode"
  program="$bin/payments_server"
  if [[ "$kind" == floor ]]; then
    name="floor-$store-$mode"
    database="serve_floor_$mode"
    program="$floor"
  fi
  case "$store" in
    sqlite) spec="sqlite:$work/$name.sqlite3" ;;
    postgres) spec="postgres:$IDEM_TEST_PG_CONNINFO dbname=$database" ;;
  esac
  if [[ "$mode" == async ]]; then
    flags+=(--async)
    [[ -z "$async_threads" ]] || flags+=(--threads "$async_threads")
  fi
  echo "== $(basename "$program") ${flags[*]} on $store" >&2
  # The servers' command lines (issue #51: the demo's may take more flags later; keep the two
  # alike, so that the floor serves what idem's server serves).
  start "$name" "$program" --port 0 --processor "$processor_url" --store "$spec" "${flags[@]}"
  local pid=$started_pid sampler perf_file=""
  port="$(wait_listening "$work/$name.log")"
  [[ -z "$perf_dir" ]] || perf_file="$perf_dir/$store-$kind-$mode.data"
  cpu_window "$pid" "$work/$name.cpu" "$perf_file" &
  sampler=$!
  line="$(drive "http://127.0.0.1:$port" /v1/payments)" || {
    kill "$sampler" 2>/dev/null || true
    stop "$pid"
    return 1
  }
  wait "$sampler" || true
  stop "$pid"
  echo "$line"
  echo "cpu: $(cat "$work/$name.cpu" 2>/dev/null || echo 0)"
}

# The figures of one server's run (serve's output): sets run_line, run_rate, run_p50, run_p99 and
# run_cpu_us (its CPU per intent answered in the window, µs).
read_run() {
  local output="$1" ticks answered
  run_line="$(grep '^bench: ' <<<"$output")"
  ticks="$(sed -n 's/^cpu: //p' <<<"$output")"
  run_rate="$(rate_of "$run_line")"
  run_p50="$(p50_of "$run_line")"
  run_p99="$(p99_of "$run_line")"
  answered="$(answered_of "$run_line")"
  run_cpu_us="$(python3 -c "import sys; t, hz, n = map(float, sys.argv[1:]); print(f'{t / hz * 1e6 / n:.0f}' if n else 'n/a')" "${ticks:-0}" "$ticks_per_second" "${answered:-0}")"
  run_cpu_s="$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "${ticks:-0}" "$ticks_per_second")"
}
# "A/B" to two decimals, "inf" when B is 0, "n/a" when either is not a number.
ratio_of() {
  python3 -c "
import sys
try:
    a, b = float(sys.argv[1]), float(sys.argv[2])
except ValueError:
    print('n/a'); sys.exit()
print(f'{a / b:.2f}' if b else 'inf')" "$1" "$2"
}

if [[ " $stores " == *" postgres "* ]]; then
  # A database per server, so that each starts empty.
  for mode in blocking async; do
    psql "$IDEM_TEST_PG_CONNINFO" -qc "CREATE DATABASE serve_$mode" >/dev/null
    [[ -z "$floor" ]] || psql "$IDEM_TEST_PG_CONNINFO" -qc "CREATE DATABASE serve_floor_$mode" >/dev/null
  done
fi

# "N/s p50 A p99 B ms cpu C µs/intent" of the last read_run.
figures() { echo "$run_rate/s p50 $run_p50 p99 $run_p99 ms cpu $run_cpu_us µs/intent"; }
# measure STORE MODE [floor] LABEL: one server's run (serve), read into run_* (read_run), and
# its two lines printed under LABEL.
measure() {
  local label="${*: -1}" output
  output="$(serve "${@:1:$#-1}")"  # a server that fails stops the script (set -e)
  read_run "$output"
  echo "$label: $run_line"
  echo "$label server cpu: $run_cpu_s s in the window, $run_cpu_us µs/intent"
}

results=()
floor_results=()
for store in $stores; do
  declare -A idem_figures=() idem_rate=() idem_cpu=()
  measure "$store" blocking "$store blocking"
  b_rate="$run_rate"
  b_p99="$run_p99"
  idem_figures[blocking]="$(figures)"
  idem_rate[blocking]="$run_rate"
  idem_cpu[blocking]="$run_cpu_us"
  if ((have_async)); then
    measure "$store" async "$store async"
    a_rate="$run_rate"
    a_p99="$run_p99"
    idem_figures[async]="$(figures)"
    idem_rate[async]="$run_rate"
    idem_cpu[async]="$run_cpu_us"
    ratio="$(ratio_of "$a_rate" "$b_rate")"
    results+=("$store async $a_rate/s p99 $a_p99 ms | blocking $b_rate/s p99 $b_p99 ms | ratio $ratio")
  else
    idem_figures[async]="n/a (payments_server has no --async)"
    idem_rate[async]="n/a"
    idem_cpu[async]="n/a"
    results+=("$store async n/a (payments_server has no --async) | blocking $b_rate/s p99 $b_p99 ms | ratio n/a")
  fi
  for mode in async blocking; do
    if [[ -z "$floor" ]]; then
      floor_results+=("$store idem $mode ${idem_figures[$mode]} | floor $mode n/a (no floor server) | idem/floor n/a")
      continue
    fi
    measure "$store" "$mode" floor "$store floor $mode"
    floor_results+=("$store idem $mode ${idem_figures[$mode]} | floor $mode $(figures) | idem/floor $(ratio_of "${idem_rate[$mode]}" "$run_rate")× intents/s, $(ratio_of "${idem_cpu[$mode]}" "$run_cpu_us")× cpu/intent")
  done
  unset idem_figures idem_rate idem_cpu
done
stop "$processor_pid"

echo
echo "== $concurrency intents in flight, processor latency $latency_ms ms, $duration_s s measured" \
  "after $warmup_s s, $(nproc) cores"
printf '%s\n' "${results[@]}"
echo "processor alone $(rate_of "$processor_line")/s p50 $(p50_of "$processor_line") p99 $(p99_of "$processor_line") ms (the ceiling)"
echo "== idem beside its floor (issue #51's goals: idem/floor ≥ 0.90× intents/s, ≤ 1.15× cpu/intent)"
printf '%s\n' "${floor_results[@]}"
