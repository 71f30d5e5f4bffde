#!/usr/bin/env python3
"""What including idem costs a build: compile time of one translation unit.

    scripts/compile_cost.py [--repetitions N] [--json FILE] [--compiler CXX ...]
                            [--include DIR] [--incremental-only]

Compiles two translation units N times each (default 7), alternating, and reports the median CPU
time (user + system) of each and their ratio:

    idem                      #include <idem/idem.hpp>
    baseline                  #include <string>, <unordered_map>, <chrono>

and, to say where the time goes, four more:

    standard_headers_of_idem  every standard header idem/idem.hpp includes, nothing of ours
    interface_headers         the baseline and only the standard headers whose types idem's
                              interface holds or whose functions it cannot do without
                              (INTERFACE_HEADERS); the core includes these, <variant> (for
                              std::monostate) and a few C and POSIX headers, and nothing else
    idempotent                #include <idem/server/idempotent.hpp> (the server side alone)
    retrying                  #include <idem/client/retrying.hpp> (the client side alone)

and what idem adds to a typical translation unit, one that already includes what almost every
service's file does (TYPICAL: <algorithm> <chrono> <functional> <map> <memory> <mutex>
<string> <thread> <vector>):

    typical                   those standard headers alone
    typical_with_idem         those, then #include <idem/idem.hpp>

incremental_s = typical_with_idem - typical (medians) is the number the compile-cost goal is
about: a stand-in for a standard facility stays only where it saves at least 10% of it.

with CXX -std=c++20 -O2 -c (g++ and clang++ by default, each where installed). --include DIR
measures the headers in DIR/idem instead of this checkout's (an older version: git archive REV
include | tar -x -C /tmp/old); --incremental-only compiles the two typical units alone. With clang++, one more compile of the first unit under -ftime-trace says what
share of its time went where ("breakdown"): the standard headers (parsed, and what they
instantiate for themselves), idem's own code parsed, the templates idem's code instantiates
(standard containers for its classes that are not templates, mostly), and the back end.

CPU time moves with the machine's load; the compilers' own counters do not. One more compile of
each unit reads them ("counters"): with g++, -ftime-report's garbage-collected memory in all
(gc_mb) and what template instantiation allocated of it (instantiation_mb); with clang++, the
number of templates -ftime-trace saw instantiated (instantiations).

--json writes {"flags", "date", "commit", "compilers": {CXX: {idem_s, baseline_s, ratio,
repetitions, medians_s: {unit: s}, runs_s: {unit: [s, ...]}, breakdown: {part: share},
counters: {unit: {counter: value}}, version}}}, where
"commit" is the checkout's HEAD (with "-dirty" when its include/ differs from it) and breakdown
is clang++'s alone; scripts/bench.sh puts it into its results as "compile_cost".
"""

import argparse
import datetime
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

FLAGS = ["-std=c++20", "-O2", "-c"]
MAIN = "\nint main() { return 0; }\n"
BASELINE = "#include <chrono>\n#include <string>\n#include <unordered_map>\n" + MAIN
TYPICAL = "".join(f"#include <{name}>\n" for name in ("algorithm", "chrono", "functional", "map",
                                                     "memory", "mutex", "string", "thread",
                                                     "vector"))
# The standard headers a core of this design could not do without: the types in its interface
# (atomics, mutexes, shared_ptr, optional, vector, span, error codes, exceptions) and
# std::to_chars for the canonical form of a JSON number.
INTERFACE_HEADERS = ("array", "atomic", "bit", "charconv", "concepts", "cstddef", "cstdint",
                     "cstring", "exception", "limits", "memory", "mutex", "optional", "span",
                     "stdexcept", "string_view", "system_error", "type_traits", "utility",
                     "vector")


def side_header(include_dir, path):
    """idem/<path>, or where versions before the client/ and server/ floors kept it."""
    if os.path.exists(os.path.join(include_dir, "idem", path)):
        return "idem/" + path
    return "idem/" + path.split("/", 1)[1]


def sources(include_dir, incremental_only=False):
    """The translation units, by name: the two compared, and three that say where time goes."""
    typical = {
        "typical": TYPICAL + MAIN,
        "typical_with_idem": TYPICAL + "#include <idem/idem.hpp>\n" + MAIN,
    }
    if incremental_only:
        return typical
    return {**typical,
        "idem": "#include <idem/idem.hpp>\n" + MAIN,
        "baseline": BASELINE,
        # Every standard header the core includes, and nothing of ours: the part of idem.hpp's
        # cost that only including fewer standard headers could lower.
        "standard_headers_of_idem": "".join(
            f"#include <{name}>\n" for name in standard_headers(include_dir)) + MAIN,
        "interface_headers": "".join(f"#include <{name}>\n" for name in INTERFACE_HEADERS)
        + BASELINE,
        "idempotent": f"#include <{side_header(include_dir, 'server/idempotent.hpp')}>\n" + MAIN,
        "retrying": f"#include <{side_header(include_dir, 'client/retrying.hpp')}>\n" + MAIN,
    }


def standard_headers(include_dir):
    """The <...> headers (not idem's) that idem/idem.hpp includes, directly or through ours."""
    seen_files = set()
    found = set()
    pending = [os.path.join(include_dir, "idem", "idem.hpp")]
    while pending:
        path = pending.pop()
        if path in seen_files:
            continue
        seen_files.add(path)
        # `#if __has_include(<h>)` ... `#else` (a fallback, e.g. core/detail/entropy.hpp's <random>
        # where there is no <sys/random.h>): the first branch is the one a build here compiles,
        # so the #else branch's headers are not counted. Other conditionals count both ways.
        conditionals = []  # per open #if: "has_include", "fallback" (its #else), or "other"
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                directive = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
                if directive:
                    kind, rest = directive.groups()
                    if kind.startswith("if"):
                        has_include = kind == "if" and rest.strip().startswith("__has_include")
                        conditionals.append("has_include" if has_include else "other")
                    elif kind in ("elif", "else") and conditionals and \
                            conditionals[-1] == "has_include":
                        conditionals[-1] = "fallback"
                    elif kind == "endif" and conditionals:
                        conditionals.pop()
                    continue
                if "fallback" in conditionals:
                    continue
                match = re.match(r"\s*#\s*include\s*<([^>]+)>", line)
                if not match:
                    continue
                name = match.group(1)
                if name.startswith("idem/"):
                    pending.append(os.path.join(include_dir, name))
                else:
                    found.add(name)
    return sorted(found)


def time_trace_breakdown(trace_path):
    """Shares of a clang -ftime-trace compile: {standard_headers, idem_parse,
    idem_instantiation, back_end}, adding up to 1.

    Each event's own time (less the events nested in it) is charged to the innermost file being
    read when it happened: a template instantiated while idem's code is parsed is idem's, one a
    standard header instantiates for itself is the standard headers'. Instantiations left to the
    end of the file (PerformPendingInstantiations) are of function templates that idem's inline
    functions call: idem's too, since the standard headers alone leave almost none.
    """
    with open(trace_path, encoding="utf-8") as handle:
        events = [e for e in json.load(handle)["traceEvents"]
                  if e.get("ph") == "X" and not e["name"].startswith("Total")
                  and e["name"] not in ("ExecuteCompiler", "Frontend", "Backend")]
    events.sort(key=lambda e: (e["ts"], -e["dur"]))
    own = [e["dur"] for e in events]
    files = []
    stack = []
    for index, event in enumerate(events):
        while stack and events[stack[-1]]["ts"] + events[stack[-1]]["dur"] <= event["ts"]:
            stack.pop()
        if stack:
            own[stack[-1]] -= event["dur"]
        if event["name"] == "Source":
            files.append(event["args"]["detail"])
        else:
            files.append(next((files[i] for i in reversed(stack)
                               if events[i]["name"] == "Source"), None))
        stack.append(index)
    shares = {"standard_headers": 0.0, "idem_parse": 0.0, "idem_instantiation": 0.0,
              "back_end": 0.0}
    for event, time, path in zip(events, own, files):
        instantiation = event["name"].startswith(("Instantiate", "PerformPending"))
        if path is None:
            part = "idem_instantiation" if instantiation else "back_end"
        elif "/idem/" in path.replace(os.sep, "/"):
            part = "idem_instantiation" if instantiation else "idem_parse"
        else:
            part = "standard_headers"
        shares[part] += time
    total = sum(shares.values()) or 1
    return {name: time / total for name, time in shares.items()}


def time_report_counters(report):
    """g++ -ftime-report's memory, in MB: {"gc_mb": its TOTAL, "instantiation_mb": the
    "template instantiation" line's}. Each line ends in the memory it allocated ("187M", "904k")
    and, from g++ 11 on, its share of the total ("( 81%)")."""
    counters = {}
    for line in report.splitlines():
        name, colon, rest = line.partition(":")
        key = {"TOTAL": "gc_mb", "template instantiation": "instantiation_mb"}.get(name.strip())
        if not colon or key is None:
            continue
        amounts = re.findall(r"(\d+(?:\.\d+)?)([kMG])\b", rest)
        if amounts:
            number, unit = amounts[-1]
            counters[key] = float(number) * {"k": 1 / 1024, "M": 1, "G": 1024}[unit]
    return counters


def trace_instantiations(trace_path):
    """How many templates a clang -ftime-trace (granularity 0) saw instantiated."""
    with open(trace_path, encoding="utf-8") as handle:
        return sum(1 for e in json.load(handle)["traceEvents"]
                   if e.get("ph") == "X" and e["name"] in ("InstantiateClass",
                                                          "InstantiateFunction"))


def read_counters(compiler, path, include_dir, folder):
    """The compiler's own counters for one unit (see the module's docstring)."""
    base = os.path.splitext(os.path.basename(path))[0]
    output = os.path.join(folder, base + ".o")
    if "clang" in os.path.basename(compiler):
        subprocess.run([compiler, *FLAGS, f"-I{include_dir}", path, "-o", output,
                        "-ftime-trace", "-ftime-trace-granularity=0"], check=True)
        return {"instantiations": trace_instantiations(os.path.join(folder, base + ".json"))}
    report = subprocess.run([compiler, *FLAGS, f"-I{include_dir}", path, "-o", output,
                             "-ftime-report"], check=True, capture_output=True, text=True).stderr
    return time_report_counters(report)


def compile_once(compiler, source, include_dir, output):
    """The compiler's CPU time (user + system, its own children included), in seconds.

    CPU time rather than wall time: on a machine others are building on, the wall clock measures
    their load as much as our headers.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([compiler, *FLAGS, f"-I{include_dir}", source, "-o", output], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(compiler, repetitions, include_dir, folder, incremental_only=False):
    paths = {}
    units = sources(include_dir, incremental_only)
    for name, text in units.items():
        paths[name] = os.path.join(folder, f"{name}.cpp")
        with open(paths[name], "w", encoding="utf-8") as handle:
            handle.write(text)
    runs = {name: [] for name in units}
    # One untimed compile of each first: the headers come into the page cache.
    for name, path in paths.items():
        compile_once(compiler, path, include_dir, os.path.join(folder, f"{name}.o"))
    for _ in range(repetitions):
        for name, path in paths.items():
            runs[name].append(compile_once(compiler, path, include_dir,
                                           os.path.join(folder, f"{name}.o")))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    incremental = {
        "incremental_s": medians["typical_with_idem"] - medians["typical"],
        "typical_s": medians["typical"],
    }
    if incremental_only:
        return {**incremental, "repetitions": repetitions, "medians_s": medians, "runs_s": runs}
    counters = {name: read_counters(compiler, path, include_dir, folder)
                for name, path in paths.items()}
    breakdown = None
    if "clang" in os.path.basename(compiler):
        # read_counters left idem.cpp's trace behind.
        breakdown = time_trace_breakdown(os.path.join(folder, "idem.json"))
    idem_s = statistics.median(runs["idem"])
    baseline_s = statistics.median(runs["baseline"])
    return {
        "idem_s": idem_s,
        "baseline_s": baseline_s,
        "ratio": idem_s / baseline_s,
        **incremental,
        "repetitions": repetitions,
        "medians_s": medians,
        "runs_s": runs,
        "counters": counters,
        **({"breakdown": breakdown} if breakdown else {}),
    }


def checkout_commit(root):
    """HEAD of the checkout the headers come from, "-dirty" if include/ differs from it."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "include"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("-dirty" if changed else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--compiler", action="append", metavar="CXX")
    parser.add_argument("--include", metavar="DIR",
                        help="the folder holding idem/ to measure (default: this checkout's)")
    parser.add_argument("--incremental-only", action="store_true",
                        help="only what idem.hpp adds to a typical translation unit")
    options = parser.parse_args()
    if options.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    compilers = options.compiler or [c for c in ("g++", "clang++") if shutil.which(c)]
    if not compilers:
        print("compile_cost.py: no C++ compiler found (g++, clang++)", file=sys.stderr)
        return 1
    include_dir = options.include or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                  "include")
    include_dir = os.path.normpath(os.path.abspath(include_dir))
    result = {
        "flags": " ".join(FLAGS),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": checkout_commit(os.path.dirname(include_dir)),
        "compilers": {},
    }
    with tempfile.TemporaryDirectory(prefix="idem-compile-cost-") as folder:
        for compiler in compilers:
            try:
                entry = measure(compiler, options.repetitions, include_dir, folder,
                                options.incremental_only)
            except (OSError, subprocess.CalledProcessError) as error:
                print(f"compile_cost.py: {compiler} failed: {error}", file=sys.stderr)
                return 1
            version = subprocess.run([compiler, "--version"], capture_output=True, text=True)
            entry["version"] = (version.stdout.splitlines() or [""])[0]
            result["compilers"][compiler] = entry
            print(f"{compiler} {result['flags']}: idem.hpp adds {entry['incremental_s']:.3f} s to "
                  f"a typical unit ({entry['typical_s']:.3f} s without it; median of "
                  f"{options.repetitions})")
            if not options.incremental_only:
                print(f"{compiler} {result['flags']}: idem.hpp {entry['idem_s']:.3f} s, "
                      f"<string>+<unordered_map>+<chrono> {entry['baseline_s']:.3f} s, "
                      f"ratio {entry['ratio']:.2f} (median of {options.repetitions})")
    if options.json:
        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
