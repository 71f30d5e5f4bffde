#!/usr/bin/env bash
# The payments demo: a payment is charged exactly once however often its request is repeated or
# its server dies, and receipted exactly once however often its message is relayed or its
# consumer dies. Real processes, real HTTP, real Redis, real crashes (examples/payments/).
#
#   scripts/demo.sh                      processor + two servers sharing one SQLite file, faults
#                                        on, ~1,000 intents from the chaos client (a tenth of
#                                        them from clients that give up after one try); the
#                                        reconciler finishing what those left; a relay and two
#                                        receipt consumers on a private Redis, killed with -9 at
#                                        random; the report on charges, the reconciler, receipts
#   scripts/demo.sh --store postgres     the same, on one PostgreSQL (started here, as the test
#                                        script starts it)
#   scripts/demo.sh --blocking           the same with the servers on cpp-httplib, a thread per
#                                        connection (the default is payments_server --async:
#                                        Boost.Beast on event loops, one io_context per core;
#                                        --async says so); combines with --store
#   scripts/demo.sh --intents N --concurrency C --seed S
#                                        a bigger or smaller run, or a reproducible one
#   scripts/demo.sh server ARGS...       build if needed and run one program with ARGS
#   scripts/demo.sh processor ARGS...    (--help lists each program's options)
#   scripts/demo.sh chaos|reconcile|relay|receipts ARGS...
#
# Installs what is missing (Debian packages), builds in build/demo (Release), and stops every
# process it started however it exits. --bin DIR uses programs already built in DIR instead
# (the test suite runs the scenario this way). Exits 0 when every intent was charged exactly
# once (a given-up intent: at most once, and then complete or in the reconciler's report) and
# every payment receipted exactly once; 1 otherwise. The servers check their callers' API keys
# under a secret made for the run; the chaos client issues each account's key under it.
set -euo pipefail

usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
user_dir="$PWD"

# --- arguments -------------------------------------------------------------------------------
program=""
store=sqlite
intents=1000
concurrency=8
seed=""
bin=""
server_mode=(--async)  # the servers' own flag: event loops, unless --blocking
case "${1:-}" in
  server | processor | chaos | reconcile | relay | receipts) program="$1"; shift ;;
esac
if [[ -z "$program" ]]; then
  while (($#)); do
    case "$1" in
      --store) store="${2:?--store needs sqlite or postgres}"; shift ;;
      --intents) intents="${2:?--intents needs a number}"; shift ;;
      --concurrency) concurrency="${2:?--concurrency needs a number}"; shift ;;
      --seed) seed="${2:?--seed needs a number}"; shift ;;
      --bin) bin="${2:?--bin needs a directory}"; shift ;;
      --async) server_mode=(--async) ;;
      --blocking) server_mode=() ;;
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
  purposes=(build adapters examples)
  [[ "$store" != postgres ]] || purposes+=(servers)
  configuration=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DIDEM_BUILD_EXAMPLES=ON -DIDEM_BUILD_TESTS=OFF
    -DIDEM_BUILD_BENCH=OFF -DIDEM_SANITIZE= -DIDEM_REQUIRE_ADAPTERS=ON)
  idem_configure_uses "${configuration[@]}"
  idem_install scripts/demo.sh "${purposes[@]}"
  echo "== building the demo in build/demo" >&2
  cmake -S "$root" -B "$root/build/demo" -G Ninja "${configuration[@]}" \
    $(idem_compiler_launcher) >/dev/null
  cmake --build "$root/build/demo" --target payments_processor payments_server payments_chaos \
    payments_reconcile payments_relay payments_receipts >&2
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
redis_started=0

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
  if ((redis_started)); then
    bash "$root/scripts/servers/redis.sh" stop "$work" >/dev/null 2>&1 || true
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

# keep_alive NAME PROGRAM ARGS...: runs payments_PROGRAM with ARGS, restarting it whenever it
# dies (the kill -9s: the nemesis's and its own --crash-after-...), until the scenario ends.
keep_alive() {
  local name="$1" program="$2" restarts=0
  shift 2
  while [[ ! -e "$work/stopping" ]]; do
    "$bin/payments_$program" "$@" >>"$work/$name.log" 2>&1 &
    echo $! >"$work/$name.pid"
    wait $! 2>/dev/null || true
    [[ ! -e "$work/stopping" ]] || break
    restarts=$((restarts + 1))
    echo "$restarts" >"$work/$name.restarts"
    sleep 0.05  # a program failing at start does not spin
  done
}

# nemesis: until the chaos client is done, every 0.2 to 1.1 s, kill -9 the relay or a receipt
# consumer, at random; counts the kills in $work/kills.relay and $work/kills.receipts.
nemesis() {
  local victim kind tenths
  while [[ ! -e "$work/chaos-done" ]]; do
    tenths=$((RANDOM % 10 + 2))
    sleep "$((tenths / 10)).$((tenths % 10))"
    [[ ! -e "$work/chaos-done" ]] || break
    victim="$(printf '%s\n' relay receipts-a receipts-b | shuf -n 1)"
    kind="${victim%%-*}"
    if kill -9 "$(cat "$work/$victim.pid")" 2>/dev/null; then
      echo "$victim" >>"$work/kills.$kind"
    fi
  done
}

case "$store" in
  sqlite)
    store_spec="sqlite:$work/payments.sqlite3"
    receipts_spec="sqlite:$work/receipts.sqlite3"
    ;;
  postgres)
    postgres_started=1
    echo "== starting PostgreSQL"
    bash "$root/scripts/servers/postgres.sh" start "$work" >/dev/null
    # shellcheck disable=SC1091
    source "$work/postgres.env"
    store_spec="postgres:$IDEM_TEST_PG_CONNINFO"
    receipts_spec="$store_spec"
    ;;
esac
redis_started=1
echo "== starting Redis"
bash "$root/scripts/servers/redis.sh" start "$work" >/dev/null
# shellcheck disable=SC1091
source "$work/redis.env"
redis="$IDEM_TEST_REDIS_HOST:$IDEM_TEST_REDIS_PORT"

# The secret the servers check API keys under, the run's own (payments_server
# --auth-secret-file): no key issued under it outlives the run.
secret="$work/auth.secret"
(umask 077 && head -c 32 /dev/urandom | base64 >"$secret")
# The processor's webhooks: signed under a secret of the run's own, sent to the servers listed
# in the targets file once they listen, received into one SQLite file both replicas share.
webhook_secret="$work/webhook.secret"
(umask 077 && head -c 32 /dev/urandom | base64 >"$webhook_secret")
webhook_targets="$work/webhook-targets"
webhook_db="$work/webhooks.sqlite3"

fail_rate=0.1
crash_rate=0.02
# A tenth of the intents have a client that sends once and never retries; 30% of those ask their
# server to crash after the charge (--crash-when-asked), so that the reconciler has abandoned
# payments to finish whatever the server's own 2% of crashes happen to hit.
give_up=0.1
give_up_crash=0.3
drop_rate=0.05
lease_ms=1000
relay_crash_rate=0.03
receipts_crash_rate=0.01
refund_rate=0.2
webhook_duplicate_rate=0.1
webhook_crash_rate=0.02

"$bin/payments_processor" --port 0 --db "$work/processor.sqlite3" --fail-rate "$fail_rate" \
  --latency-ms 2 --webhook-targets-file "$webhook_targets" \
  --webhook-secret-file "$webhook_secret" --refund-rate "$refund_rate" \
  --webhook-duplicate-rate "$webhook_duplicate_rate" >"$work/processor.log" 2>&1 &
pids+=($!)
processor_port="$(wait_listening "$work/processor.log")"
processor="http://127.0.0.1:$processor_port"

servers=()
for name in server-a server-b; do
  supervise "$name" --processor "$processor" --store "$store_spec" --lease-ms "$lease_ms" \
    --crash-after-charge "$crash_rate" --crash-when-asked 1 --auth-secret-file "$secret" \
    --webhook-db "$webhook_db" --webhook-secret-file "$webhook_secret" \
    --crash-in-webhook "$webhook_crash_rate" ${server_mode[@]+"${server_mode[@]}"} 2>/dev/null &
  pids+=($!)
done
for name in server-a server-b; do
  servers+=("http://127.0.0.1:$(wait_listening "$work/$name.log")")
done
printf '%s\n' "${servers[@]}" >"$webhook_targets.new" && mv "$webhook_targets.new" "$webhook_targets"

keep_alive relay relay --store "$store_spec" --redis "$redis" \
  --crash-after-publish "$relay_crash_rate" &
pids+=($!)
for name in receipts-a receipts-b; do
  keep_alive "$name" receipts --store "$receipts_spec" --redis "$redis" --consumer "$name" \
    --suppressed-log "$work/suppressed.log" --crash-after-commit "$receipts_crash_rate" &
  pids+=($!)
done
nemesis &
pids+=($!)

echo "== processor $processor (503 before charging: $fail_rate)"
if ((${#server_mode[@]})); then
  server_words="on event loops (--async)"
else
  server_words="a thread per connection (--blocking)"
fi
echo "== servers ${servers[*]} on $store, $server_words (crash after charging: $crash_rate, and" \
  "when asked; lease ${lease_ms} ms; callers authenticated by API key)"
echo "== webhooks from the processor to the servers: charge.succeeded, and charge.refunded for" \
  "$refund_rate of charges (some delivered first), signed, retried until 2xx, $webhook_duplicate_rate" \
  "sent twice on purpose; servers crash in the middle of one: $webhook_crash_rate"
echo "== relay and receipt consumers (two) on Redis $redis, each killed with -9 every few seconds"
echo "== chaos client: $intents intents, concurrency $concurrency, dropped connections: $drop_rate," \
  "giving up after one try: $give_up (asking for a crash: $give_up_crash of those)"
# In the background, waited for: a signal to this script then stops everything at once.
"$bin/payments_chaos" --servers "$(
  IFS=,
  echo "${servers[*]}"
)" --processor "$processor" --intents "$intents" --concurrency "$concurrency" \
  --drop-rate "$drop_rate" --give-up "$give_up" --give-up-crash "$give_up_crash" \
  --given-up-log "$work/given-up.jsonl" --auth-secret-file "$secret" ${seed:+--seed "$seed"} &
pids+=($!)
charges=0
wait $! || charges=$?
touch "$work/chaos-done"
echo
echo "== payments_reconcile (once the servers' last claims are past their lease)"
reconciled=0
"$bin/payments_reconcile" --store "$store_spec" --processor "$processor" --lease-ms "$lease_ms" \
  --wait-ms "$((lease_ms + 500))" --report "$work/reconcile.jsonl" || reconciled=$?
if [[ -s "$work/reconcile.jsonl" ]]; then
  echo "report rows (JSON Lines; a person reads these):"
  sed 's/^/  /' "$work/reconcile.jsonl"
fi
echo
echo "== given-up intents (checked against the ledger, the report, and a replay of each)"
given_up=0
"$bin/payments_chaos" --mode check-given-up --servers "$(
  IFS=,
  echo "${servers[*]}"
)" --processor "$processor" --given-up-log "$work/given-up.jsonl" \
  --report "$work/reconcile.jsonl" --auth-secret-file "$secret" || given_up=$?
echo
echo "== receipts report (after the outbox drained; waited at most 30 s)"
receipts=0
"$bin/payments_receipts" --mode report --store "$receipts_spec" --payments "$store_spec" \
  --redis "$redis" --suppressed-log "$work/suppressed.log" --wait-s 30 || receipts=$?
echo
echo "== webhooks report (after the processor delivered every event; waited at most 60 s)"
webhooks=0
"$bin/payments_chaos" --mode check-webhooks --processor "$processor" --webhook-db "$webhook_db" \
  --wait-s 60 || webhooks=$?
# restarts NAME...: how often these programs died and were restarted, together.
restarts() {
  local total=0 name
  for name in "$@"; do
    [[ ! -e "$work/$name.restarts" ]] || total=$((total + $(cat "$work/$name.restarts")))
  done
  echo "$total"
}
# random_kills KIND: how many kill -9s the nemesis landed on the relay or the consumers.
random_kills() { if [[ -e "$work/kills.$1" ]]; then wc -l <"$work/kills.$1"; else echo 0; fi; }
echo "server crashes       $(restarts server-a server-b) (each restarted by the supervisor on its port)"
echo "relay kills          $(restarts relay) (kill -9, restarted: $(random_kills relay) at random" \
  "moments, the rest right after Redis took a batch)"
echo "consumer kills       $(restarts receipts-a receipts-b) (kill -9, restarted:" \
  "$(random_kills receipts) at random moments, the rest after a commit, before XACK)"
# The reconciler's exit status 1 (a person is needed) is a finding, not a failure: what it could
# not finish is in its report, which the given-up check holds against the ledger. 2 (the pass did
# not finish) is a failure.
if ((charges == 0 && given_up == 0 && reconciled <= 1 && receipts == 0 && webhooks == 0)); then
  echo "verdict              EXACTLY ONCE: every intent charged once (or, given up, complete or" \
    "reported), every payment receipted once, every webhook applied once"
  exit 0
fi
echo "verdict              FAILED"
keep_logs=1
exit 1
