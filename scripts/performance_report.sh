#!/usr/bin/env bash
# Regenerate docs/performance.md and its plots from a run of scripts/bench.sh:
#
#   scripts/bench.sh --json bench/results/results.json -- --benchmark_repetitions=3 \
#       --benchmark_report_aggregates_only=true
#   scripts/performance_report.sh [RESULTS.json]
#
# The runs live in bench/results/: results.json (the default RESULTS.json) and, where present,
# compile_cost.json, results_wide.json and results_later.json. The page and its plots are
# written into docs/ (docs/performance.md, docs/performance/*.svg).
#
# Installs gnuplot (Debian: gnuplot-nox) when it is missing, then runs
# scripts/performance_report.py, which says what the template's placeholders are.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source scripts/lib/packages.sh
idem_install scripts/performance_report.sh plots
exec python3 scripts/performance_report.py "$@"
