#!/usr/bin/env python3
"""Add the machine a benchmark run came from to its Google Benchmark JSON.

    scripts/machine_info.py RESULTS.json [--compile-cost FILE] [--compiler TEXT]

Writes "machine": {cpu, cores, memory_gib, kernel, os, compiler, flags} into RESULTS.json (and,
with --compile-cost, scripts/compile_cost.py's JSON as "compile_cost"), so that a report made
from the results (scripts/performance_report.py) says where they were measured. The compiler is
`g++ --version`'s first line unless --compiler names it: a binary packed by
scripts/pack_bench.sh runs where no compiler is installed, and carries its own in compiler.txt.
scripts/bench.sh runs this after every run with --json.
"""

import argparse
import json
import os
import platform
import subprocess


def first_line(command):
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return ""


def field(path, prefix, separator):
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(prefix):
                return line.split(separator, 1)[1].strip().strip('"')
    return ""


def machine(compiler):
    memory = field("/proc/meminfo", "MemTotal:", ":").split()
    return {
        "cpu": field("/proc/cpuinfo", "model name", ":"),
        "cores": os.cpu_count(),
        "memory_gib": round(int(memory[0]) / 2**20, 1) if memory else None,
        "kernel": platform.release(),
        "os": field("/etc/os-release", "PRETTY_NAME=", "="),
        "compiler": compiler if compiler is not None else first_line(["g++", "--version"]),
        "flags": "-O2 -DNDEBUG",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--compile-cost")
    parser.add_argument("--compiler")
    args = parser.parse_args()
    with open(args.results, encoding="utf-8") as handle:
        results = json.load(handle)
    if args.compile_cost and os.path.getsize(args.compile_cost) > 0:
        with open(args.compile_cost, encoding="utf-8") as handle:
            results["compile_cost"] = json.load(handle)
    results["machine"] = machine(args.compiler)
    with open(args.results, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
        handle.write("\n")


if __name__ == "__main__":
    main()
