#!/usr/bin/env python3
"""scripts/bench_ratios.py on results made by hand: a peer beside idem, two sides of ours beside
one peer, and the workloads whose baseline is idem itself (tiered_replay against idem_memory,
batch_inbox and sqlite_full_cycle against idem_single), each read against that side."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_ratios  # noqa: E402

failures = 0


def check(condition, what):
    global failures
    if not condition:
        failures += 1
        print(f"FAILED: {what}")


def run(name, ns, real=False):
    return {"name": name, "run_name": name, "run_type": "iteration", "time_unit": "ns",
            "cpu_time": ns if not real else 1.0, "real_time": ns}


results = {"benchmarks": [
    run("claim/idem", 50), run("claim/absl", 100),
    run("limiter_acquire/idem_token", 3), run("limiter_acquire/idem_window", 4),
    run("limiter_acquire/mutex_bucket", 6),
    run("tiered_replay/idem_tiered_postgres", 240), run("tiered_replay/idem_tiered_redis", 220),
    run("tiered_replay/idem_memory", 200),
    run("tiered_first/idem_tiered_postgres", 1000), run("tiered_first/idem_postgres", 1000),
    run("batch_inbox/idem_batch/postgres/real_time", 10, True),
    run("batch_inbox/idem_single/postgres/real_time", 200, True),
    run("sqlite_full_cycle/idem_group/threads:16/real_time", 150, True),
    run("sqlite_full_cycle/idem_single/threads:16/real_time", 1350, True),
]}
rows = {(w, a, ours): (ns, dict(peers)) for w, a, ours, ns, peers in bench_ratios.pairs(results)}

check(rows[("claim", (), "idem")][1] == {"absl": 100}, "a peer stands beside idem")
check(set(k[2] for k in rows if k[0] == "limiter_acquire") == {"idem_token", "idem_window"},
      "two sides of ours, each beside the peer")
check(rows[("tiered_replay", (), "idem_tiered_postgres")][1] == {"idem_memory": 200},
      "tiered_replay reads against idem_memory")
check(("tiered_replay", (), "idem_memory") not in rows, "the baseline is no row of its own")
check(rows[("tiered_first", (), "idem_tiered_postgres")][1] == {"idem_postgres": 1000},
      "tiered_first reads against idem_postgres")
check(rows[("batch_inbox", ("postgres", "real_time"), "idem_batch")][1] == {"idem_single": 200},
      "batch_inbox reads against idem_single, on wall time")
check(rows[("sqlite_full_cycle", ("threads:16", "real_time"), "idem_group")][1] ==
      {"idem_single": 1350}, "sqlite_full_cycle reads against idem_single per thread count")
text = "\n".join(bench_ratios.table_lines(results))
check("0.05" in text and "1.20" in text, "the table prints the ratios")

if failures:
    sys.exit(1)
print("bench_ratios: all checks passed")
