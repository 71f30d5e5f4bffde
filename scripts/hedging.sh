#!/usr/bin/env bash
# bench/hedging: the hedging CDF run. Builds bench/tools/hedging_cdf.cpp (idem and Boost.Asio,
# header-only), runs its 10,000 calls to a heavy-tailed dependency without and with hedges on a
# manual clock (the same numbers every run), and writes into docs/performance/:
#
#   hedging_cdf.svg   the two latency CDFs on one chart (gnuplot)
#   hedging_cdf.md    their quantiles side by side, and the extra attempts
#
# Works from any directory; installs what it needs (Debian packages) first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
source "$root/scripts/lib/packages.sh"
idem_install scripts/hedging.sh build adapters plots

mkdir -p build/hedging
g++ -std=c++20 -O2 -Iinclude -Itests/support bench/tools/hedging_cdf.cpp \
  -o build/hedging/hedging_cdf -pthread
build/hedging/hedging_cdf >build/hedging/latencies.txt 2>build/hedging/summary.txt
cat build/hedging/summary.txt
python3 scripts/hedging_plot.py build/hedging/latencies.txt build/hedging/summary.txt \
  docs/performance
