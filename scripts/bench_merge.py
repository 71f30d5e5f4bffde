#!/usr/bin/env python3
"""Join the results of scripts/bench.sh's --interleave passes into its results file.

    bench_merge.py RESULTS PROCESSES KEEP_REPETITIONS PASS.json...

RESULTS is the file the last pass (the benchmarks no --interleave named) wrote; the passes'
entries go before its own, in the order given. With PROCESSES above 1 each pass ran that many
times, each in a process of its own, and kept every repetition (Google Benchmark's
--benchmark_display_aggregates_only); here a benchmark's repetitions from all its processes are
pooled and its mean, median, stddev and cv computed again over the pool, for the times and for
every counter, as Google Benchmark computes them within one process. So a median spans what
differs between processes (where the allocator, the kernel and the host put things), not only
what differs between repetitions of one. The pooled aggregates carry "processes": PROCESSES.
KEEP_REPETITIONS 0 drops the single repetitions afterwards (what
--benchmark_report_aggregates_only asked for), 1 keeps them.
"""
import json
import statistics
import sys

# Fields of a repetition that describe it rather than measure it.
NOT_MEASURED = {
    "family_index",
    "per_family_instance_index",
    "repetitions",
    "repetition_index",
    "threads",
    "iterations",
}
AGGREGATES = ("mean", "median", "stddev", "cv")


def measured_fields(runs):
    fields = []
    for run in runs:
        for key, value in run.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and key not in NOT_MEASURED and key not in fields:
                fields.append(key)
    return fields


def aggregate(values, kind):
    mean = statistics.fmean(values)
    if kind == "mean":
        return mean
    if kind == "median":
        return statistics.median(values)
    stddev = statistics.stdev(values) if len(values) > 1 else 0.0
    if kind == "stddev":
        return stddev
    return stddev / mean if mean != 0 else 0.0


def pooled(name, runs, processes):
    """The four aggregate entries of one benchmark, over all of its repetitions."""
    fields = measured_fields(runs)
    entries = []
    for kind in AGGREGATES:
        entry = {k: v for k, v in runs[0].items() if k not in fields and k != "repetition_index"}
        entry.update(
            name=f"{name}_{kind}",
            run_type="aggregate",
            aggregate_name=kind,
            aggregate_unit="percentage" if kind == "cv" else "time",
            repetitions=len(runs),
            iterations=len(runs),
            processes=processes,
        )
        for field in fields:
            values = [run[field] for run in runs if field in run]
            if values:
                entry[field] = aggregate(values, kind)
        entries.append(entry)
    return entries


def pool(entries, processes, keep_repetitions):
    order, runs, others = [], {}, {}
    for entry in entries:
        name = entry.get("run_name", entry["name"])
        if name not in runs:
            order.append(name)
            runs[name], others[name] = [], []
        measured = entry.get("run_type") == "iteration" and not entry.get("error_occurred")
        if measured:
            runs[name].append(entry)
        elif entry.get("run_type") != "aggregate":
            others[name].append(entry)  # a skipped or failed run: kept as it came
    out = []
    for name in order:
        if keep_repetitions:
            out += runs[name]
        out += others[name]
        if runs[name]:
            out += pooled(name, runs[name], processes)
    return out


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    results, processes, keep = argv[1], int(argv[2]), argv[3] == "1"
    with open(results, encoding="utf-8") as handle:
        rest = json.load(handle)
    first = []
    for name in argv[4:]:
        with open(name, encoding="utf-8") as handle:
            first += json.load(handle).get("benchmarks", [])
    if processes > 1:
        first = pool(first, processes, keep)
        rest.setdefault("context", {})["idem_interleaved_processes"] = processes
    rest["benchmarks"] = first + rest.get("benchmarks", [])
    with open(results, "w", encoding="utf-8") as handle:
        json.dump(rest, handle, indent=2)


if __name__ == "__main__":
    main(sys.argv)
