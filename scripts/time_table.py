#!/usr/bin/env python3
"""Where a test run's time went: build time per target and test time per test, per build.

    scripts/time_table.py [--top N] BUILD_DIR...

For each build tree it reads ninja's log (.ninja_log: the last build of each output, its start
and end in ms) and sums the compile and link time of each target (the CMakeFiles/<target>.dir
part of an output's path; custom commands under their folder), and it reads the ctest log that
scripts/test.sh keeps (ctest.log: "Test #n: name .... Passed 1.23 sec") for each test's time.
Prints, per build, the total compile time (the sum over outputs: with two jobs the wall time is
about half of it), the N most expensive targets and the N slowest tests, as Markdown tables.
scripts/test.sh prints it at the end of a full run; docs/development.md keeps one.
"""
import argparse
import os
import re
import sys


def ninja_outputs(build):
    """{output: seconds} of the last build of each output in build/.ninja_log."""
    path = os.path.join(build, ".ninja_log")
    last = {}
    if not os.path.exists(path):
        return last
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4:
                continue
            start, end, output = int(fields[0]), int(fields[1]), fields[3]
            last[output] = (end - start) / 1000.0
    return last


def target_of(output):
    match = re.search(r"CMakeFiles/([^/]+)\.dir/", output)
    if match:
        return match.group(1)
    return os.path.dirname(output) or output


def test_times(build):
    """[(seconds, name, status)] from build/ctest.log."""
    path = os.path.join(build, "ctest.log")
    times = []
    if not os.path.exists(path):
        return times
    pattern = re.compile(r"Test\s+#\d+: (.+?) \.+\s*(\*{0,3}\w[\w ]*?)\s+([0-9.]+) sec")
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            match = pattern.search(line)
            if match:
                times.append((float(match.group(3)), match.group(1).strip(), match.group(2).strip()))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("builds", nargs="+")
    options = parser.parse_args()
    for build in options.builds:
        outputs = ninja_outputs(build)
        tests = test_times(build)
        if not outputs and not tests:
            continue
        print(f"\n### {os.path.basename(os.path.normpath(build))}\n")
        if outputs:
            per_target = {}
            for output, seconds in outputs.items():
                name = target_of(output)
                count, total = per_target.get(name, (0, 0.0))
                per_target[name] = (count + 1, total + seconds)
            total = sum(seconds for seconds in outputs.values())
            print(f"compile and link: {total:,.0f} s summed over {len(outputs)} outputs "
                  f"({len(per_target)} targets)\n")
            print("| target | outputs | seconds | share |")
            print("| --- | ---: | ---: | ---: |")
            ranked = sorted(per_target.items(), key=lambda item: -item[1][1])
            for name, (count, seconds) in ranked[:options.top]:
                print(f"| {name} | {count} | {seconds:,.0f} | {100 * seconds / total:.0f}% |")
        if tests:
            total = sum(seconds for seconds, _, _ in tests)
            print(f"\ntests: {total:,.0f} s summed over {len(tests)} tests\n")
            print("| test | seconds | status |")
            print("| --- | ---: | --- |")
            for seconds, name, status in sorted(tests, reverse=True)[:options.top]:
                print(f"| {name[:90]} | {seconds:,.1f} | {status} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
