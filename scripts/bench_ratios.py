#!/usr/bin/env python3
"""Pair each of idem's benchmarks with its peers and print the ratios (ours / peer's time).

    scripts/bench_ratios.py RESULTS.json [--markdown]

RESULTS.json is Google Benchmark's JSON output (scripts/bench.sh --json FILE). Benchmark names
are WORKLOAD/IMPL[/ARG...]: IMPL `idem` or `idem_*` (idem_memory) is ours, every other IMPL
under the same WORKLOAD and ARGs is a peer. Parts that only say how a run was driven
(iterations:N, min_time:T, repeats:N) are left out when pairing.

With repetitions, the median of each benchmark is used (Google Benchmark's median aggregate, or
the median of the runs when only those were written). The time is wall time for benchmarks that
ask for it (real_time in the name) and CPU time otherwise, as each benchmark was written to be
read. A ratio below 1 means idem is faster.

The module is also imported by scripts/performance_report.py.
"""

import json
import statistics
import sys

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
DRIVER_PARTS = ("iterations:", "min_time:", "repeats:", "min_warmup_time:")


# Benchmarks whose two sides are both idem name the side measured against the other: the
# outbox_publish pair compares a handler that publishes with the same handler without it.
MEASURED_SIDES = ("with_publish", "with_wait")


# Workloads whose baseline is idem too (issue 34's): the side named here stands where a peer
# would, and every other side of the workload is read against it.
BASELINE_SIDES = {
    "tiered_replay": "idem_memory",
    "tiered_first": "idem_postgres",
    "batch_inbox": "idem_single",
    "sqlite_full_cycle": "idem_single",
}


def is_ours(impl, workload=None):
    if workload is not None and BASELINE_SIDES.get(workload) == impl:
        return False
    return impl == "idem" or impl.startswith("idem_") or impl in MEASURED_SIDES


def split_name(run_name):
    """(workload, impl, args): args keeps every part that names what is measured."""
    parts = run_name.split("/")
    if len(parts) < 2:
        return parts[0], "", ()
    args = tuple(p for p in parts[2:] if not p.startswith(DRIVER_PARTS))
    return parts[0], parts[1], args


def load(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def measurements(results):
    """{run_name: entry} with the median time in ns (key "ns") and the entry's counters.

    Errored benchmarks are left out: they have no time worth comparing.
    """
    medians = {}
    runs = {}
    for entry in results.get("benchmarks", []):
        if entry.get("error_occurred"):
            continue
        name = entry.get("run_name", entry["name"])
        field = "real_time" if "real_time" in name.split("/") else "cpu_time"
        ns = entry[field] * UNIT_NS.get(entry.get("time_unit", "ns"), 1.0)
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                medians[name] = dict(entry, ns=ns)
        else:
            runs.setdefault(name, []).append(dict(entry, ns=ns))
    out = {}
    for name, entries in runs.items():
        if name in medians:
            out[name] = medians[name]
        else:
            median_ns = statistics.median(e["ns"] for e in entries)
            closest = min(entries, key=lambda e: abs(e["ns"] - median_ns))
            out[name] = dict(closest, ns=median_ns)
    for name, entry in medians.items():
        out.setdefault(name, entry)
    return out


def pairs(results):
    """[(workload, args, ours_impl, ours_ns, [(peer_impl, peer_ns), ...])], in run order."""
    measured = measurements(results)
    groups = {}
    order = []
    for name, entry in measured.items():
        workload, impl, args = split_name(name)
        key = (workload, args)
        if key not in groups:
            groups[key] = {}
            order.append(key)
        groups[key][impl] = entry["ns"]
    rows = []
    for key in order:
        impls = groups[key]
        ours = [impl for impl in impls if is_ours(impl, key[0])]
        peers = [(impl, ns) for impl, ns in impls.items() if not is_ours(impl, key[0])]
        if not peers:
            continue
        # Several of ours under one workload (limiter_acquire's token and window limiters):
        # each beside the same peers.
        for impl in ours:
            rows.append((key[0], key[1], impl, impls[impl], peers))
    return rows


def format_ns(ns):
    if ns >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} µs"
    return f"{ns:.3g} ns"


def table_lines(results, markdown=False):
    rows = pairs(results)
    lines = []
    if not rows:
        return ["(no benchmark of idem had a peer beside it in these results)"]
    if markdown:
        lines.append("| benchmark | idem | peer | peer's time | idem / peer |")
        lines.append("| --- | --- | --- | --- | --- |")
    else:
        header = f"{'benchmark':<46} {'idem':>10}  {'peer':<20} {'time':>10}  {'idem/peer':>9}"
        lines.append(header)
        lines.append("-" * len(header))
    for workload, args, ours, ours_ns, peers in rows:
        # Our side is named when it is not plain `idem` (idem_token beside idem_window).
        label = "/".join((workload,) + ((ours,) if ours != "idem" else ()) + args)
        for peer, peer_ns in peers:
            ratio = ours_ns / peer_ns if peer_ns > 0 else float("inf")
            if markdown:
                cell = f"`{label}`" if label else ""
                lines.append(f"| {cell} | {format_ns(ours_ns)} | {peer} | "
                             f"{format_ns(peer_ns)} | {ratio:.2f} |")
            else:
                lines.append(f"{label:<46} {format_ns(ours_ns):>10}  {peer:<20} "
                             f"{format_ns(peer_ns):>10}  {ratio:>9.2f}")
            label = ""  # the benchmark's name once, on its first peer's line
    compile_cost = results.get("compile_cost")
    if compile_cost:
        lines.append("")
        lines.extend(compile_lines(compile_cost, markdown))
    return lines


def compile_lines(compile_cost, markdown=False):
    lines = []
    if markdown:
        lines.append("| compiler | `#include <idem/idem.hpp>` | `<string>`, `<unordered_map>`, "
                     "`<chrono>` | ratio |")
        lines.append("| --- | --- | --- | --- |")
    for compiler, entry in compile_cost.get("compilers", {}).items():
        ratio = entry["idem_s"] / entry["baseline_s"]
        if markdown:
            lines.append(f"| {compiler} | {entry['idem_s']:.3f} s | {entry['baseline_s']:.3f} s "
                         f"| {ratio:.2f} |")
        else:
            lines.append(f"compile cost ({compiler}, {compile_cost.get('flags', '')}, median of "
                         f"{entry['repetitions']}): idem.hpp {entry['idem_s']:.3f} s, baseline "
                         f"{entry['baseline_s']:.3f} s, ratio {ratio:.2f}")
    return lines


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    markdown = "--markdown" in argv[2:]
    try:
        results = load(argv[1])
    except (OSError, ValueError) as error:
        print(f"bench_ratios.py: cannot read {argv[1]}: {error}", file=sys.stderr)
        return 1
    print("\n".join(table_lines(results, markdown)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
