#!/usr/bin/env python3
"""scripts/bench_merge.py on results made by hand: two processes' repetitions pooled into one
median, mean, stddev and cv (times and counters), each process's own aggregates replaced, a
failed run kept, the passes placed before the rest, and one process joined as it came."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MERGE = os.path.join(ROOT, "scripts", "bench_merge.py")
NAME = "claim/idem/real_time"


def repetition(index, ns, allocs):
    return {"name": NAME, "run_name": NAME, "run_type": "iteration", "repetitions": 3,
            "repetition_index": index, "threads": 1, "iterations": 1000, "real_time": ns,
            "cpu_time": ns - 0.5, "time_unit": "ns", "allocs_per_op": allocs}


def own_median(ns):
    return {"name": NAME + "_median", "run_name": NAME, "run_type": "aggregate",
            "aggregate_name": "median", "aggregate_unit": "time", "repetitions": 3, "threads": 1,
            "iterations": 3, "real_time": ns, "cpu_time": ns, "time_unit": "ns"}


FAILED = {"name": "broken/idem", "run_name": "broken/idem", "run_type": "iteration",
          "error_occurred": True, "error_message": "no server"}


def write(folder, name, content):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(content, handle)
    return path


def merged(processes, keep, passes):
    with tempfile.TemporaryDirectory() as folder:
        rest = write(folder, "rest.json", {"context": {"host_name": "here"},
                                           "benchmarks": [{"name": "later", "real_time": 7}]})
        paths = [write(folder, f"pass{i}.json", {"benchmarks": p}) for i, p in enumerate(passes)]
        subprocess.run([sys.executable, MERGE, rest, str(processes), keep] + paths, check=True)
        with open(rest, encoding="utf-8") as handle:
            return json.load(handle)


def check(condition, what):
    if not condition:
        print("FAILED:", what)
        sys.exit(1)


first = [repetition(i, ns, a) for i, (ns, a) in enumerate([(1, 2), (2, 2), (3, 5)])]
second = [repetition(i, ns, a) for i, (ns, a) in enumerate([(10, 2), (11, 3), (30, 2)])]
times = [1, 2, 3, 10, 11, 30]
allocs = [2, 2, 5, 2, 3, 2]

result = merged(2, "0", [first + [own_median(2), FAILED], second + [own_median(11)]])
entries = result["benchmarks"]
pooled = {e["aggregate_name"]: e for e in entries if e.get("run_name") == NAME}
check(sorted(pooled) == ["cv", "mean", "median", "stddev"], f"four pooled aggregates: {pooled}")
check(all(e["run_type"] == "aggregate" for e in entries if e.get("run_name") == NAME),
      "no single repetitions kept when the aggregates alone were asked for")
check(pooled["median"]["real_time"] == statistics.median(times), "the median over both processes")
check(pooled["median"]["cpu_time"] == statistics.median(times) - 0.5, "the CPU time pooled too")
check(pooled["mean"]["real_time"] == statistics.fmean(times), "the mean")
stddev = statistics.stdev(times)
check(abs(pooled["stddev"]["real_time"] - stddev) < 1e-12, "the sample stddev")
check(abs(pooled["cv"]["real_time"] - stddev / statistics.fmean(times)) < 1e-12, "the cv")
check(pooled["median"]["allocs_per_op"] == statistics.median(allocs), "a counter pooled")
check(pooled["cv"]["aggregate_unit"] == "percentage", "the cv is a percentage, as Google's")
check(pooled["median"]["repetitions"] == 6 and pooled["median"]["processes"] == 2,
      "the pooled entries say how many repetitions and processes")
check(pooled["median"]["name"] == NAME + "_median", "named as Google Benchmark names them")
check(FAILED in entries, "a failed run is kept")
check(entries[-1]["name"] == "later", "the passes go before the rest")
check(result["context"]["idem_interleaved_processes"] == 2, "the context says it was pooled")

kept = merged(2, "1", [first, second])["benchmarks"]
check(sum(e.get("run_type") == "iteration" for e in kept) == 6, "repetitions kept when asked")

single = merged(1, "0", [first + [own_median(2)]])
check(single["benchmarks"][:-1] == first + [own_median(2)], "one process is joined as it came")
check("idem_interleaved_processes" not in single["context"], "one process leaves no mark")
print("bench_merge: all checks passed")
