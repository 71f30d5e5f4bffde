#!/usr/bin/env bash
# Build idem's benchmarks in Release (g++ -O2, NDEBUG) and run them: the README's bench command.
#
#   scripts/bench.sh                        run every benchmark
#   scripts/bench.sh --filter REGEX         only those matching REGEX (--benchmark_filter)
#   scripts/bench.sh --json FILE            also write the results to FILE as JSON
#   scripts/bench.sh -- --benchmark_repetitions=5 ...   anything else goes to the binary as is
#
# Works from any directory; the build tree is build/bench and is reused. The store adapters'
# benchmarks run against real servers (PostgreSQL, Redis) that this script starts on private
# ports in a temporary folder and stops when it exits, as scripts/test.sh does.
set -euo pipefail

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

bench_args=()
while (($#)); do
  case "$1" in
    --filter) bench_args+=("--benchmark_filter=${2:?--filter needs a regex}"); shift ;;
    --filter=*) bench_args+=("--benchmark_filter=${1#--filter=}") ;;
    --json)
      bench_args+=("--benchmark_out=${2:?--json needs a file}" --benchmark_out_format=json)
      shift
      ;;
    --json=*) bench_args+=("--benchmark_out=${1#--json=}" --benchmark_out_format=json) ;;
    -h | --help) usage; exit 0 ;;
    --) shift; bench_args+=("$@"); break ;;
    *) bench_args+=("$1") ;;
  esac
  shift
done

# A relative --json path means relative to where the user ran us, not to the repo root.
for i in "${!bench_args[@]}"; do
  case "${bench_args[$i]}" in
    --benchmark_out=/*) ;;
    --benchmark_out=*) bench_args[$i]="--benchmark_out=$PWD/${bench_args[$i]#--benchmark_out=}" ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! compgen -G 'bench/*.cpp' >/dev/null; then
  echo "scripts/bench.sh: no benchmarks yet (bench/*.cpp)" >&2
  exit 1
fi

missing=()
if command -v dpkg >/dev/null 2>&1; then
  for package in g++ cmake ninja-build libbenchmark-dev libxxhash-dev libssl-dev libcuckoo-dev \
    libtbb-dev libabsl-dev pkg-config libsqlite3-dev libpq-dev postgresql libhiredis-dev \
    redis-server; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
fi
if ((${#missing[@]})); then
  sudo=()
  ((EUID == 0)) || sudo=(sudo)
  echo "== installing ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build/bench -G Ninja -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
  -DIDEM_BUILD_BENCH=ON -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_SANITIZE=
cmake --build build/bench --target idem_bench

root="$PWD"
source "$root/scripts/lib/servers.sh"
idem_start_servers
if ((${#idem_servers_failed[@]})); then
  echo "scripts/bench.sh: ${idem_servers_failed[*]} did not start; their benchmarks will fail" >&2
fi
# Not exec: the servers are stopped when this script exits.
build/bench/bench/idem_bench "${bench_args[@]}"
