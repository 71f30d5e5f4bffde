#!/usr/bin/env python3
"""scripts/compile_cost.py's -ftime-trace breakdown on a trace made by hand: each event's own
time (less what is nested in it) is charged to the innermost file being read, a standard
header's parse to the standard headers, an instantiation made while idem's code is read to
idem, the instantiations left to the end of the file to idem too, and the rest to the back
end; and the report's placeholders read the breakdown back."""
import importlib.util
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    spec.loader.exec_module(module)
    return module


def event(name, ts, dur, detail=None):
    entry = {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}
    if detail is not None:
        entry["args"] = {"detail": detail}
    return entry


IDEM = "/src/include/idem/idem.hpp"
STORE = "/src/include/idem/store/memory.hpp"
VECTOR = "/usr/include/c++/12/vector"
TRACE = [
    event("ExecuteCompiler", 0, 200),
    event("Frontend", 0, 190),
    event("Source", 0, 100, IDEM),                      # idem: 100 - 30 - 20 - 25 = 25
    event("Source", 5, 30, VECTOR),                     # standard: 30 - 10 = 20
    event("ParseClass", 10, 10, "std::vector"),         # standard: 10
    event("InstantiateClass", 40, 20, "std::vector<idem::record>"),  # idem's instantiation
    event("Source", 65, 25, STORE),                     # idem: 25 - 15 = 10
    event("ParseClass", 70, 15, "idem::memory_store"),  # idem: 15 - 5 = 10
    event("InstantiateFunction", 75, 5, "std::vector<int>::push_back"),  # idem's instantiation
    event("PerformPendingInstantiations", 120, 15),     # idem's instantiation: 15 - 12 = 3
    event("InstantiateFunction", 121, 12, "std::sort<...>"),  # idem's instantiation: 12
    event("CodeGen Function", 150, 5, "main"),          # back end
    event("Total Source", 0, 999),                      # totals are not events of their own
]


def main():
    compile_cost = load("compile_cost")
    failures = []

    def check(what, got, expected):
        if abs(got - expected) > 1e-9:
            failures.append(f"{what}: {got!r}, expected {expected!r}")

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "idem.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"traceEvents": TRACE}, handle)
        shares = compile_cost.time_trace_breakdown(path)
    total = 25 + 10 + 10 + 20 + 10 + 20 + 5 + 3 + 12 + 5
    check("standard headers", shares["standard_headers"], 30 / total)
    check("idem parse", shares["idem_parse"], 45 / total)
    check("idem instantiation", shares["idem_instantiation"], 40 / total)
    check("back end", shares["back_end"], 5 / total)
    check("sum", sum(shares.values()), 1.0)

    report = load("performance_report")
    results = {"compile_cost": {"flags": "-std=c++20 -O2 -c", "date": "2026-12-01T00:00:00+00:00",
                                "commit": "abc", "compilers": {"clang++": {
                                    "idem_s": 4.0, "baseline_s": 1.0, "ratio": 4.0,
                                    "medians_s": {"idem": 4.0, "baseline": 1.0,
                                                  "standard_headers_of_idem": 1.5},
                                    "runs_s": {"idem": [4.5, 3.5, 4.0]},
                                    "breakdown": shares}}},
               "machine": {"cpu": "Test CPU", "cores": 2}}
    page = report.fill("{{compile clang++ share:idem_parse}} {{compile clang++ part_s:back_end}} "
                       "{{compile clang++ parse_floor}} {{compile clang++ range:idem}}",
                       results, {}, {}, [])
    expected = (f"{100 * 45 / total:.0f}% {5 / total * 4.0:.2f} "
                f"{(1.5 + 45 / total * 4.0) / 1.0:.2f} 3.50–4.50")
    if page != expected:
        failures.append(f"placeholders: {page!r}, expected {expected!r}")

    # g++ -ftime-report's lines: the memory column is the last amount with a unit (g++ 12 adds
    # its share in parentheses after it); k and M both read as MB.
    time_report = """
Time variable                                   usr           sys          wall           GGC
 phase parsing                      :   1.38 ( 79%)   0.78 ( 87%)   2.17 ( 82%)   187M ( 81%)
 template instantiation             :   0.84 ( 48%)   0.29 ( 32%)   1.12 ( 42%)   105M ( 46%)
 parser enumerator list             :   0.00 (  0%)   0.00 (  0%)   0.02 (  1%)   512k (  0%)
 TOTAL                              :   1.75          0.90          2.66          230M
"""
    counters = compile_cost.time_report_counters(time_report)
    check("gc_mb", counters.get("gc_mb", -1), 230)
    check("instantiation_mb", counters.get("instantiation_mb", -1), 105)
    check("k reads as MB", compile_cost.time_report_counters(
        " TOTAL                              :   0.01          0.00          0.01           512k\n"
    ).get("gc_mb", -1), 0.5)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "unit.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"traceEvents": TRACE}, handle)
        check("instantiations", compile_cost.trace_instantiations(path), 3)

    gcc = {"idem_s": 3.0, "baseline_s": 1.0, "ratio": 3.0,
           "medians_s": {"idem": 3.0, "baseline": 1.0, "interface_headers": 1.25},
           "counters": {"idem": {"gc_mb": 180, "instantiation_mb": 61},
                        "standard_headers_of_idem": {"gc_mb": 118, "instantiation_mb": 33},
                        "interface_headers": {"gc_mb": 103, "instantiation_mb": 30},
                        "baseline": {"gc_mb": 70, "instantiation_mb": 23}}}
    results["compile_cost"]["compilers"]["g++"] = gcc
    results["compile_cost"]["compilers"]["clang++"]["counters"] = {"idem": {"instantiations": 8315}}
    page = report.fill(
        "{{compile g++ counter:gc_mb:idem}} {{compile clang++ counter:instantiations:idem}} "
        "{{compile g++ idem_gc_mb:instantiation}} {{compile g++ idem_gc_mb:parse}} "
        "{{compile g++ gc_ratio:standard_headers_of_idem}} "
        "{{compile g++ gc_floor:standard_headers_of_idem}} {{compile g++ gc_floor:interface_headers}} "
        "{{compile g++ ratio:interface_headers}}", results, {}, {}, [])
    # idem's instantiation: 61 - 33 = 28; its parse: 180 - 118 - 28 = 34.
    expected = "180 8,315 28 34 1.69 2.17 1.96 1.25"
    if page != expected:
        failures.append(f"counter placeholders: {page!r}, expected {expected!r}")
    try:
        report.fill("{{compile g++ counter:gc_mb:retrying}}", results, {}, {}, [])
        failures.append("a counter the run lacks did not stop the report")
    except report.ReportError:
        pass

    # A run kept beside the main one answers the placeholders that carry its prefix, from its own
    # benchmarks and compile cost; one that is not there stops the report.
    def run_of(ns, ratio):
        return {"benchmarks": [{"name": "w/x", "run_name": "w/x", "run_type": "iteration",
                                "real_time": ns, "cpu_time": ns, "time_unit": "ns"}],
                "compile_cost": {"compilers": {"g++": {"ratio": ratio}}}}
    main_run, later_run = run_of(100.0, 1.5), run_of(250.0, 2.5)
    later = report.fill(None, later_run, report.bench_ratios.measurements(later_run), {}, [],
                        inner="later")
    page = report.fill("{{time w/x}} {{later:time w/x}} {{later:compile_goal g++ 2}}", main_run,
                       report.bench_ratios.measurements(main_run), {}, [], extras={"later": later})
    expected = "100 ns 250 ns 2.50× (goal ≤ 2×: **not met**)"
    if page != expected:
        failures.append(f"a later run's placeholders: {page!r}, expected {expected!r}")
    try:
        report.fill("{{later:time w/x}}", main_run, report.bench_ratios.measurements(main_run),
                    {}, [])
        failures.append("a later run's placeholder without its file did not stop the report")
    except report.ReportError:
        pass

    for failure in failures:
        print("FAILED:", failure)
    if failures:
        return 1
    print("compile_cost_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
