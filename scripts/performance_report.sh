#!/usr/bin/env bash
# Regenerate docs/performance.md and its plots from a run of scripts/bench.sh:
#
#   scripts/bench.sh --json docs/performance/results.json -- --benchmark_repetitions=3 \
#       --benchmark_report_aggregates_only=true
#   scripts/performance_report.sh [RESULTS.json]
#
# Installs gnuplot (Debian: gnuplot-nox) when it is missing, then runs
# scripts/performance_report.py, which says what the template's placeholders are.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source scripts/lib/packages.sh
idem_install scripts/performance_report.sh plots
exec python3 scripts/performance_report.py "$@"
