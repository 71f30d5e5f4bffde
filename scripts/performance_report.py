#!/usr/bin/env python3
"""Make docs/performance.md and its plots from one run of scripts/bench.sh.

    scripts/performance_report.py [--draft] [RESULTS.json]

RESULTS.json (default bench/results/results.json) is what `scripts/bench.sh --json FILE`
wrote. The text comes from docs/performance/template.md, in which these are replaced:

    {{machine}}                 the machine, compiler and run date from the results
    {{ratios}}                  every benchmark of ours beside each peer (scripts/bench_ratios.py)
    {{compile}}                 the compile-cost table
    {{compile_run}}             where and when the compile cost was measured, from which commit
    {{threads}}                 throughput against threads, per workload and implementation
    {{scaling}}                 time per operation against live records, and bytes per record
    {{time NAME}}               the median time of benchmark NAME (its run name, as in the JSON)
    {{ratio NAME OTHER}}        NAME's median time divided by OTHER's, two decimals
    {{goal NAME OTHER LIMIT}}   that ratio, and whether it is within LIMIT
    {{cv NAME}}                 NAME's coefficient of variation over the repetitions
    {{cpu NAME}}, {{cpu_ratio NAME OTHER}}
                                the same with CPU time, whatever the benchmark reports
    {{diff NAME OTHER}}         NAME's median time minus OTHER's
    {{sum NAME -NAME ...}}      the median times of the NAMEs added, those with a '-' taken away
    {{scaled NAME FACTOR}}      NAME's median time times FACTOR
    {{side NAME FACTOR OTHER}}  "below" or "above": where NAME's median time times FACTOR lies
                                against OTHER's (for text that must not contradict its run)
    {{compile_goal CXX LIMIT}}  the compile-cost ratio with CXX, and whether it is within LIMIT
    {{counter NAME COUNTER}}    a counter of NAME (allocs_per_op, bytes_per_record, ...)
    {{wide:...}}                any of the above, from the scaling run on a larger machine
                                (bench/results/results_wide.json: scripts/pack_bench.sh's
                                binary run there with IDEM_BENCH_MAX_THREADS); its thread plots
                                are wide_threads_*.svg
    {{later:...}}               any of the above, from a later run of scripts/bench.sh kept
                                beside the main one (bench/results/results_later.json, with
                                its own compile cost); its thread plots are later_threads_*.svg
    {{compile CXX FIELD}}       idem_s, baseline_s or ratio of the compile cost with CXX, or the
                                median of a unit (idem, baseline, standard_headers_of_idem, ...);
                                range:UNIT, the least and most of a unit's runs, in seconds;
                                share:PART, a part's share of idem.hpp's time in percent, and
                                part_s:PART, in seconds (PART: standard_headers, idem_parse,
                                idem_instantiation, back_end; clang++ only); parse_floor, what
                                idem.hpp would cost if its code instantiated nothing (the
                                standard headers it includes, and idem's parse), over baseline;
                                counter:NAME:UNIT, gc_ratio:UNIT, idem_gc_mb:PART,
                                gc_floor:UNIT and ratio:UNIT, from the compilers' own counters
                                and the units' medians (see compile_counter)

The compile cost comes from bench/results/compile_cost.json where that file exists (a run of
`scripts/bench.sh --compile-cost-only --json bench/results/compile_cost.json`, which measures
it alone, on the headers as they are, with the machine it ran on), and otherwise from
RESULTS.json's own "compile_cost".

The plots are SVG files under docs/performance/, made with gnuplot (Debian: gnuplot-nox, which
scripts/performance_report.sh installs when it is missing). A placeholder that names a
benchmark the results do not have stops the script with an error: the document never shows a
number that is not in the results. --draft writes the missing ones as "(draft: ...)" instead,
to look at the layout after a partial run (--filter); never commit such a page.
"""

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ratios  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOCS = os.path.join(ROOT, "docs")
# The page's template and plots stay beside it; the runs it is made from are data, not docs.
FIGURES = os.path.join(DOCS, "performance")
RESULTS = os.path.join(ROOT, "bench", "results")
# Runs kept beside the main one, each named in the template by its prefix ({{wide:time X}}).
EXTRA_RUNS = {
    "wide": os.path.join(RESULTS, "results_wide.json"),
    "later": os.path.join(RESULTS, "results_later.json"),
}
COMPILE = os.path.join(RESULTS, "compile_cost.json")

# Workloads run at 1, 2 and 4 threads, and the arguments that pick one curve family.
THREADED = [
    ("idempotent_first", (), "idempotent_first: a new key through idempotent"),
    ("idempotent_replay", (), "idempotent_replay: a stored key through idempotent"),
    ("claim_new", (), "claim_new: a new key claimed in the store"),
    ("replay_hit", ("64",), "replay_hit/64: a completed key replayed (64 B)"),
    ("same_key_storm", (), "same_key_storm: every thread on one key"),
    ("mixed_90_10", ("uniform",), "mixed_90_10/uniform: 90% find, 10% complete, 1 M keys"),
]
SCALING = [
    ("scaling_claim_new", "scaling_claim_new: a new key claimed, N records held"),
    ("scaling_replay_hit", "scaling_replay_hit: a random held key replayed"),
]


class ReportError(Exception):
    pass


def threads_of(args):
    for part in args:
        if part.startswith("threads:"):
            return int(part.split(":", 1)[1])
    return 1


def without_driver(args):
    return tuple(p for p in args if not p.startswith("threads:") and p != "real_time")


def throughput(entry):
    """Operations per second, all threads together."""
    items = entry.get("items_per_second")
    if items:
        return items
    return 1e9 / entry["ns"] * threads_of(entry.get("run_name", "").split("/"))


def collect(measured):
    """{(workload, base_args): {impl: {threads or N: entry}}}."""
    table = {}
    for name, entry in measured.items():
        workload, impl, args = bench_ratios.split_name(name)
        base = without_driver(args)
        table.setdefault((workload, base), {}).setdefault(impl, {})[threads_of(args)] = entry
    return table


def gnuplot(script):
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    except FileNotFoundError as error:
        raise ReportError("gnuplot is not installed (Debian: gnuplot-nox; "
                          "scripts/performance_report.sh installs it)") from error


def plot(path, title, xlabel, ylabel, series, logx=False, logy=False, xtics=(1, 2, 4)):
    """series: {label: [(x, y), ...]}; writes an SVG line plot to path."""
    with tempfile.TemporaryDirectory(prefix="idem-plot-") as folder:
        plots = []
        for index, (label, points) in enumerate(series.items()):
            data = os.path.join(folder, f"{index}.dat")
            with open(data, "w", encoding="utf-8") as handle:
                for x, y in sorted(points):
                    handle.write(f"{x} {y}\n")
            plots.append(f"'{data}' using 1:2 with linespoints title '{label}'")
        script = "\n".join([
            "set terminal svg size 720,420 dynamic noenhanced font 'sans,12' background rgb 'white'",
            f"set output '{path}'",
            f"set title \"{title}\"",
            f"set xlabel '{xlabel}'",
            f"set ylabel '{ylabel}'",
            "set key outside right top",
            "set grid",
            "set logscale x 10\nset autoscale xfix" if logx else "",
            "set logscale y 10" if logy else "",
            "set yrange [0:*]" if not logy else "",
            f"set xtics ({', '.join(str(x) for x in xtics)})" if not logx else "",
            "plot " + ", ".join(plots),
        ])
        gnuplot(script + "\n")


def threads_section(table, figures, prefix="threads_"):
    lines = []
    for workload, base, title in THREADED:
        impls = table.get((workload, base))
        if not impls:
            continue
        counts = sorted({t for per in impls.values() for t in per})
        if len(counts) < 2:
            continue
        file_name = f"{prefix}{workload}{'_' + '_'.join(base) if base else ''}.svg"
        series = {impl: [(t, throughput(e) / 1e6) for t, e in per.items()]
                  for impl, per in impls.items()}
        plot(os.path.join(FIGURES, file_name), title, "threads", "million operations / s",
             series, xtics=counts)
        figures.append(file_name)
        lines.append(f"#### {title}")
        lines.append("")
        lines.append(f"![{workload} against threads](performance/{file_name})")
        lines.append("")
        lines.append("| implementation | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}"
                                                       for t in counts) + " |")
        lines.append("| --- |" + " --- |" * len(counts))
        for impl, per in impls.items():
            cells = []
            for t in counts:
                entry = per.get(t)
                cells.append(f"{bench_ratios.format_ns(entry['ns'])}, "
                             f"{throughput(entry) / 1e6:.2f} M/s" if entry else "")
            lines.append(f"| {impl} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def scaling_section(table, figures):
    lines = []
    memory = {}
    for workload, title in SCALING:
        per_impl = {}
        for (name, base), impls in table.items():
            if name != workload or len(base) != 1 or not base[0].isdigit():
                continue
            for impl, per in impls.items():
                entry = per.get(1)
                if entry:
                    per_impl.setdefault(impl, {})[int(base[0])] = entry
        if not per_impl:
            continue
        file_name = f"records_{workload}.svg"
        series = {impl: [(n, e["ns"]) for n, e in per.items()] for impl, per in per_impl.items()}
        plot(os.path.join(FIGURES, file_name), title, "live records", "ns per operation",
             series, logx=True)
        figures.append(file_name)
        counts = sorted({n for per in per_impl.values() for n in per})
        lines.append(f"#### {title}")
        lines.append("")
        lines.append(f"![{workload} against live records](performance/{file_name})")
        lines.append("")
        lines.append("| implementation | " + " | ".join(f"{n:,}" for n in counts) + " |")
        lines.append("| --- |" + " --- |" * len(counts))
        for impl, per in per_impl.items():
            lines.append(f"| {impl} | " + " | ".join(
                bench_ratios.format_ns(per[n]["ns"]) if n in per else "" for n in counts) + " |")
            for n, entry in per.items():
                if "bytes_per_record" in entry:
                    memory.setdefault(impl, {})[n] = entry["bytes_per_record"]
        lines.append("")
    if memory:
        counts = sorted({n for per in memory.values() for n in per})
        lines.append("#### Heap bytes per record")
        lines.append("")
        lines.append("Everything the table allocated while N records (36-byte key, 8-byte scope, "
                     "16-byte fingerprint, 64-byte response) were claimed and completed, its "
                     "reserved buckets included, divided by N.")
        lines.append("")
        lines.append("| implementation | " + " | ".join(f"{n:,}" for n in counts) + " |")
        lines.append("| --- |" + " --- |" * len(counts))
        for impl, per in memory.items():
            lines.append(f"| {impl} | " + " | ".join(
                f"{per[n]:.0f}" if n in per else "" for n in counts) + " |")
        lines.append("")
    return lines


def machine_lines(results):
    machine = results.get("machine", {})
    context = results.get("context", {})
    caches = ", ".join(f"L{c['level']} {c['type'].lower()} {c['size'] // 1024} KiB"
                       for c in context.get("caches", []))
    lines = [
        f"* CPU: {machine.get('cpu', 'unknown')}, {machine.get('cores', '?')} cores "
        f"({caches})" if caches else f"* CPU: {machine.get('cpu', 'unknown')}",
        f"* memory: {machine.get('memory_gib', '?')} GiB; {machine.get('os', '')}, "
        f"Linux {machine.get('kernel', '')}",
        f"* compiler: {machine.get('compiler', '')}, {machine.get('flags', '')}",
        f"* run: {context.get('date', '')}; load average at the start "
        f"{', '.join(f'{x:.2f}' for x in context.get('load_avg', []))}",
    ]
    return lines


def lookup(measured, name):
    entry = measured.get(name)
    if entry is None:
        raise ReportError(f"the results have no benchmark named {name!r}")
    return entry


def compile_run_text(results):
    """One sentence: the machine, compilers, date and commit of the compile-cost measurement."""
    cost = results.get("compile_cost") or {}
    if not cost:
        raise ReportError("the results have no compile cost")
    machine = results.get("compile_machine") or results.get("machine", {})
    compilers = "; ".join(entry.get("version") or name
                          for name, entry in cost.get("compilers", {}).items())
    where = f"{machine.get('cpu', 'an unknown CPU')} ({machine.get('cores', '?')} cores)"
    text = f"measured on {where} with {compilers} (`{cost.get('flags', '')}`)"
    if cost.get("date"):
        text += f", on {cost['date']}"
    if cost.get("commit"):
        text += f", of the headers of {cost['commit']}"
    if results.get("compile_machine"):
        # A link from docs/performance.md, which sits in DOCS, to the run beside the benchmarks.
        text += f" ([`{os.path.basename(COMPILE)}`]({os.path.relpath(COMPILE, DOCS)}))"
    return text


def compile_counter(compiler, entry, field, part):
    """The compile-cost placeholders that read the compilers' own counters, or a unit's ratio:

    counter:NAME:UNIT  the counter NAME (gc_mb, instantiation_mb, instantiations) of UNIT
    gc_ratio:UNIT      UNIT's g++ memory over the baseline's
    idem_gc_mb:PART    of idem.hpp's g++ memory, what idem's own code added: PART "instantiation"
                       (its template instantiation less the standard headers' own) or "parse"
                       (the rest of what it added over the standard headers)
    gc_floor:UNIT      by g++'s memory, what idem.hpp would cost with UNIT's standard headers
                       and nothing of idem's instantiated: UNIT plus idem's parse, over baseline
    ratio:UNIT         UNIT's median CPU time over the baseline's
    """
    counters = entry.get("counters", {})

    def get(unit, name):
        value = counters.get(unit, {}).get(name)
        if value is None:
            raise ReportError(f"the compile cost with {compiler} has no counter {name} of {unit}")
        return value

    if field == "counter":
        name, _, unit = part.partition(":")
        value = get(unit, name)
        return f"{value:,.0f}"
    if field == "ratio":
        medians = entry.get("medians_s", {})
        if part not in medians:
            raise ReportError(f"the compile cost with {compiler} has no runs of {part}")
        return f"{medians[part] / entry['baseline_s']:.2f}"
    standard = "standard_headers_of_idem"
    instantiated = get("idem", "instantiation_mb") - get(standard, "instantiation_mb")
    parsed = get("idem", "gc_mb") - get(standard, "gc_mb") - instantiated
    if field == "idem_gc_mb":
        if part not in ("instantiation", "parse"):
            raise ReportError(f"unknown part {part} of idem_gc_mb")
        return f"{instantiated if part == 'instantiation' else parsed:.0f}"
    if field == "gc_ratio":
        return f"{get(part, 'gc_mb') / get('baseline', 'gc_mb'):.2f}"
    return f"{(get(part, 'gc_mb') + parsed) / get('baseline', 'gc_mb'):.2f}"


def fill(template, results, measured, table, figures, draft=False, extras=None, inner=None):
    """The template with its placeholders replaced; with inner (an extra run's prefix), the
    function that replaces one placeholder from that run instead."""
    extras = extras or {}

    def replace(match):
        words = match.group(1).split()
        kind = words[0]
        prefix, colon, _ = kind.partition(":")
        if colon and prefix in EXTRA_RUNS:
            if prefix not in extras:
                raise ReportError(f"{{{{{match.group(1)}}}}} needs "
                                  f"{os.path.relpath(EXTRA_RUNS[prefix], ROOT)}")
            return extras[prefix](re.match(prefix + r":(.*)", match.group(1), re.S))
        if kind == "machine" and len(words) == 1:
            return "\n".join(machine_lines(results))
        if kind == "ratios" and len(words) == 1:
            return "\n".join(bench_ratios.table_lines(dict(results, compile_cost=None), True))
        if kind == "compile_run" and len(words) == 1:
            return compile_run_text(results)
        if kind == "compile" and len(words) == 1:
            return "\n".join(bench_ratios.compile_lines(results.get("compile_cost", {}), True))
        if kind == "threads" and len(words) == 1:
            return "\n".join(threads_section(table, figures, thread_prefix))
        if kind == "scaling" and len(words) == 1:
            return "\n".join(scaling_section(table, figures))
        if kind == "time" and len(words) == 2:
            return bench_ratios.format_ns(lookup(measured, words[1])["ns"])
        if kind == "ratio" and len(words) == 3:
            return f"{lookup(measured, words[1])['ns'] / lookup(measured, words[2])['ns']:.2f}"
        if kind == "cv" and len(words) == 2:
            for entry in results.get("benchmarks", []):
                if entry.get("run_name") == words[1] and entry.get("aggregate_name") == "cv":
                    field = "real_time" if "real_time" in words[1].split("/") else "cpu_time"
                    return f"{100 * entry[field]:.0f}%"
            raise ReportError(f"the results have no coefficient of variation for {words[1]}")
        if kind == "cpu" and len(words) == 2:
            entry = lookup(measured, words[1])
            return bench_ratios.format_ns(
                entry["cpu_time"] * bench_ratios.UNIT_NS.get(entry.get("time_unit", "ns"), 1.0))
        if kind == "cpu_ratio" and len(words) == 3:
            return f"{lookup(measured, words[1])['cpu_time'] / lookup(measured, words[2])['cpu_time']:.2f}"
        if kind == "goal" and len(words) == 4:
            ratio = lookup(measured, words[1])["ns"] / lookup(measured, words[2])["ns"]
            limit = float(words[3])
            verdict = "met" if ratio <= limit else "**not met**"
            return f"{ratio:.2f}× (goal ≤ {words[3]}×: {verdict})"
        if kind == "diff" and len(words) == 3:
            difference = lookup(measured, words[1])["ns"] - lookup(measured, words[2])["ns"]
            sign = "+" if difference >= 0 else "−"
            return f"{sign}{bench_ratios.format_ns(abs(difference))}"
        if kind == "sum" and len(words) >= 2:
            total = 0.0
            for word in words[1:]:
                sign = -1.0 if word.startswith("-") else 1.0
                total += sign * lookup(measured, word.lstrip("-+"))["ns"]
            return bench_ratios.format_ns(total)
        if kind == "scaled" and len(words) == 3:
            return bench_ratios.format_ns(lookup(measured, words[1])["ns"] * float(words[2]))
        if kind == "side" and len(words) == 4:
            scaled = lookup(measured, words[1])["ns"] * float(words[2])
            return "below" if scaled < lookup(measured, words[3])["ns"] else "above"
        if kind == "compile_goal" and len(words) == 3:
            compilers = results.get("compile_cost", {}).get("compilers", {})
            if words[1] not in compilers:
                raise ReportError(f"the results have no compile cost for {words[1]}")
            ratio = compilers[words[1]]["ratio"]
            verdict = "met" if ratio <= float(words[2]) else "**not met**"
            return f"{ratio:.2f}× (goal ≤ {words[2]}×: {verdict})"
        if kind == "counter" and len(words) == 3:
            entry = lookup(measured, words[1])
            if words[2] not in entry:
                raise ReportError(f"{words[1]} has no counter {words[2]}")
            return f"{entry[words[2]]:.3g}"
        if kind == "compile" and len(words) == 3:
            compilers = results.get("compile_cost", {}).get("compilers", {})
            if words[1] not in compilers:
                raise ReportError(f"the results have no compile cost for {words[1]}")
            entry = compilers[words[1]]
            breakdown = entry.get("breakdown", {})
            field, _, part = words[2].partition(":")
            if field in ("share", "part_s"):
                if part not in breakdown:
                    raise ReportError(f"the compile cost with {words[1]} has no {words[2]}")
                if field == "share":
                    return f"{100 * breakdown[part]:.0f}%"
                return f"{breakdown[part] * entry['idem_s']:.2f}"
            if field in ("counter", "gc_ratio", "gc_floor", "idem_gc_mb", "ratio"):
                return compile_counter(words[1], entry, field, part)
            if field == "range":
                runs = entry.get("runs_s", {}).get(part)
                if not runs:
                    raise ReportError(f"the compile cost with {words[1]} has no runs of {part}")
                return f"{min(runs):.2f}–{max(runs):.2f}"
            if words[2] == "parse_floor":
                # What idem.hpp would cost if its code instantiated nothing: the standard headers
                # it includes, and the parse of its own code; as a multiple of the baseline.
                medians = entry.get("medians_s", {})
                if "idem_parse" not in breakdown or "standard_headers_of_idem" not in medians:
                    raise ReportError(f"the compile cost with {words[1]} has no breakdown")
                floor = medians["standard_headers_of_idem"] + breakdown["idem_parse"] * entry["idem_s"]
                return f"{floor / entry['baseline_s']:.2f}"
            value = entry.get(words[2], entry.get("medians_s", {}).get(words[2]))
            if value is None:
                raise ReportError(f"the compile cost has no {words[2]}")
            return f"{value:.2f}"
        raise ReportError(f"unknown placeholder {{{{{match.group(1)}}}}}")

    def replace_or_mark(match):
        try:
            return replace(match)
        except ReportError as error:
            if not draft:
                raise
            return f"(draft: {error})"

    thread_prefix = f"{inner}_threads_" if inner else "threads_"
    if inner:
        return replace
    return re.sub(r"\{\{([^}]+)\}\}", replace_or_mark, template)


def main(argv):
    args = argv[1:]
    draft = "--draft" in args
    args = [a for a in args if a != "--draft"]
    results_path = args[0] if args else os.path.join(RESULTS, "results.json")
    if results_path in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    try:
        results = bench_ratios.load(results_path)
        if os.path.exists(COMPILE):
            # The compile cost measured on its own, after the benchmarks' run.
            compile_run = bench_ratios.load(COMPILE)
            results["compile_cost"] = compile_run["compile_cost"]
            results["compile_machine"] = compile_run.get("machine", {})
        with open(os.path.join(FIGURES, "template.md"), encoding="utf-8") as handle:
            template = handle.read()
        measured = bench_ratios.measurements(results)
        table = collect(measured)
        figures = []
        extras = {}
        for prefix, path in EXTRA_RUNS.items():
            if os.path.exists(path):
                extra_results = bench_ratios.load(path)
                extra_measured = bench_ratios.measurements(extra_results)
                extras[prefix] = fill(None, extra_results, extra_measured,
                                      collect(extra_measured), figures, inner=prefix)
        text = fill(template, results, measured, table, figures, draft, extras)
    except (OSError, ValueError, ReportError, subprocess.CalledProcessError) as error:
        print(f"performance_report.py: {error}", file=sys.stderr)
        return 1
    sources = [os.path.relpath(results_path, ROOT)]
    if os.path.exists(COMPILE):
        sources.append(os.path.relpath(COMPILE, ROOT))
    sources += [os.path.relpath(path, ROOT) for path in EXTRA_RUNS.values() if os.path.exists(path)]
    header = ("<!-- Generated by scripts/performance_report.py from "
              f"{', '.join(sources)} and docs/performance/template.md; "
              "edit those, not this file. -->\n")
    with open(os.path.join(DOCS, "performance.md"), "w", encoding="utf-8") as handle:
        handle.write(header + text)
    print(f"performance_report.py: wrote docs/performance.md and {len(figures)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
