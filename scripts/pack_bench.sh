#!/usr/bin/env bash
# Pack the Release benchmark binary with everything it loads, for a machine that has none of
# the packages scripts/bench.sh installs (a larger machine lent for a scaling run):
#
#   scripts/pack_bench.sh DIR      build build/bench's idem_bench (as scripts/bench.sh does) and
#                                  copy it, the shared libraries it links and the dynamic loader
#                                  into DIR, with DIR/run.sh
#   DIR/run.sh [ARGS...]           on the other machine: runs the binary through the packed
#                                  loader and libraries, so neither that machine's C library nor
#                                  its packages matter; ARGS go to Google Benchmark as they are
#
# Only the in-memory benchmarks can run there: the store adapters' ones need their servers,
# which scripts/bench.sh starts. Set IDEM_BENCH_MAX_THREADS for the thread counts (as
# scripts/bench.sh --max-threads does). DIR/compiler.txt names the compiler, for
# scripts/machine_info.py RESULTS.json --compiler "$(cat DIR/compiler.txt)" there.
set -euo pipefail

if [[ $# -ne 1 || "$1" == -* ]]; then
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && exit 0
  exit 2
fi
out="$(mkdir -p "$1" && cd "$1" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source scripts/lib/packages.sh
# The same build as scripts/bench.sh's, in the same tree.
configuration=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DIDEM_BUILD_BENCH=ON -DIDEM_BUILD_TESTS=OFF
  -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_SANITIZE=)
idem_configure_uses "${configuration[@]}"
idem_install scripts/pack_bench.sh build adapters bench
cmake -S . -B build/bench -G Ninja "${configuration[@]}" $(idem_compiler_launcher) >/dev/null
cmake --build build/bench --target idem_bench

binary=build/bench/bench/idem_bench
cp "$binary" "$out/idem_bench"
loader=
while read -r name arrow path _; do
  if [[ "$arrow" == "=>" && "$path" == /* ]]; then
    cp -L "$path" "$out/$name"
  elif [[ "$name" == /*ld-linux* ]]; then
    loader="$(basename "$name")"
    cp -L "$name" "$out/$loader"
  fi
done < <(ldd "$binary")
[[ -n "$loader" ]] || { echo "pack_bench.sh: no dynamic loader found in ldd's output" >&2; exit 1; }
cat >"$out/run.sh" <<RUN
#!/usr/bin/env bash
# Made by scripts/pack_bench.sh: idem_bench through the loader and libraries packed beside it.
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
exec "\$here/$loader" --library-path "\$here" "\$here/idem_bench" "\$@"
RUN
chmod +x "$out/run.sh" "$out/$loader"
# What built it, for scripts/machine_info.py --compiler on a machine with no compiler.
g++ --version | head -n 1 >"$out/compiler.txt"
echo "pack_bench.sh: $(ls "$out" | wc -l) files, $(du -sh "$out" | cut -f1), in $out"
