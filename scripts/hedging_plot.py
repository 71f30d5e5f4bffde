#!/usr/bin/env python3
"""The hedging run's two latency CDFs (scripts/hedging.sh): an SVG chart and a table.

    hedging_plot.py LATENCIES SUMMARY OUT_DIR

LATENCIES has one line a call, "unhedged <ns>" or "hedged <ns>"; SUMMARY is the run's summary
line. Writes OUT_DIR/hedging_cdf.svg (through performance_report.plot, gnuplot) and
OUT_DIR/hedging_cdf.md.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import performance_report  # noqa: E402  (the report's gnuplot line plot)

QUANTILES = (0.5, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0)


def read(path):
    runs = {"unhedged": [], "hedged": []}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, value = line.split()
            runs[name].append(int(value) / 1e6)  # ms
    for values in runs.values():
        values.sort()
    return runs


def quantile(values, q):
    return values[min(len(values) - 1, int(q * (len(values) - 1)))]


def cdf_points(values, count=150):
    """(latency ms, fraction of calls at or under it), at `count` evenly spaced ranks."""
    points = []
    for i in range(count + 1):
        q = i / count
        points.append((quantile(values, q), q))
    return points


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    runs = read(argv[1])
    with open(argv[2], encoding="utf-8") as handle:
        summary = handle.read().strip()
    out = argv[3]
    performance_report.plot(
        os.path.join(out, "hedging_cdf.svg"),
        "Latency CDF of 10,000 calls to a heavy-tailed dependency",
        "latency (ms, log scale)", "fraction of calls",
        {name: cdf_points(values) for name, values in runs.items()},
        logx=True)
    lines = ["| quantile | unhedged (ms) | hedged (ms) |", "| --- | --- | --- |"]
    for q in QUANTILES:
        label = "max" if q == 1.0 else f"p{q * 100:g}"
        lines.append(f"| {label} | {quantile(runs['unhedged'], q):.1f} | "
                     f"{quantile(runs['hedged'], q):.1f} |")
    with open(os.path.join(out, "hedging_cdf.md"), "w", encoding="utf-8") as handle:
        handle.write("<!-- written by scripts/hedging.sh; do not edit -->\n")
        handle.write("\n".join(lines) + "\n\n" + summary + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv)
