#!/usr/bin/env python3
"""scripts/check_floors.py passes on the real include/, and on a copy of it fails naming each
offence planted there: a back-include from the ground floor (core/) up to server/, two headers
that include each other, a KNOWN entry that no longer exists, and a header in a room with no
floor."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check_floors.py")
SUMMARY = re.compile(r"^floors: (\d+) headers, (\d+) back-includes \((\d+) known\), "
                     r"(\d+) mutual \((\d+) known\)$", re.M)


def run(include_dir=None):
    command = [sys.executable, SCRIPT]
    if include_dir is not None:
        command += ["--include", include_dir]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def check(condition, what, output=""):
    if not condition:
        print("FAILED:", what)
        print(output)
        sys.exit(1)


def add_include(include_dir, header, included):
    """Adds `#include <included>` after the last #include of header (inside its guard)."""
    path = os.path.join(include_dir, header)
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("#include"))
    lines.insert(last + 1, f"#include <{included}>\n")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    return last + 2  # the planted line's number


def remove_include(include_dir, header, included):
    path = os.path.join(include_dir, header)
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    kept = [line for line in lines if line.strip() != f"#include <{included}>"]
    check(len(kept) == len(lines) - 1, f"{header} includes {included} once")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(kept)


def fresh_copy(folder, name):
    include_dir = os.path.join(folder, name)
    shutil.copytree(os.path.join(ROOT, "include"), include_dir)
    return include_dir


# The real tree holds its floors; the summary counts every header.
rc, output = run()
check(rc == 0, "the real include/ passes", output)
summary = SUMMARY.search(output)
check(summary is not None, "a summary line", output)
headers = sum(len([f for f in files if f.endswith(".hpp")])
              for _, _, files in os.walk(os.path.join(ROOT, "include", "idem")))
check(int(summary.group(1)) == headers, f"the summary counts all {headers} headers", output)
check(summary.group(2) == summary.group(3) and summary.group(4) == summary.group(5),
      "every back-include and mutual pair of the real tree is known", output)

with tempfile.TemporaryDirectory() as folder:
    # A back-include: the ground floor reaching up to the server's vocabulary.
    include_dir = fresh_copy(folder, "back")
    line = add_include(include_dir, "idem/core/clock.hpp", "idem/server/outcome.hpp")
    rc, output = run(include_dir)
    check(rc == 1, "a planted back-include fails", output)
    check(f"include/idem/core/clock.hpp:{line} includes idem/server/outcome.hpp "
          "(floor 0 ground -> floor 2 engines)" in output, "the back-include is named", output)
    planted = SUMMARY.search(output)
    check(planted and int(planted.group(2)) == int(summary.group(2)) + 1
          and planted.group(3) == summary.group(3), "counted as a new back-include", output)

    # A mutual pair on one floor: observer.hpp includes outcome.hpp, planted the other way too.
    include_dir = fresh_copy(folder, "mutual")
    line = add_include(include_dir, "idem/server/outcome.hpp", "idem/server/observer.hpp")
    rc, output = run(include_dir)
    check(rc == 1, "a planted mutual include fails", output)
    check(re.search(r"include/idem/server/(outcome|observer)\.hpp:\d+ includes "
                    r"idem/server/(observer|outcome)\.hpp, which includes it back", output),
          "the mutual pair is named", output)
    check("back-include" not in output.replace("back-includes (", ""),
          "a pair on one floor is no back-include", output)

    # A known back-include gone: the entry must leave KNOWN.
    include_dir = fresh_copy(folder, "stale")
    remove_include(include_dir, "idem/idem.hpp", "idem/http.hpp")
    rc, output = run(include_dir)
    check(rc == 1, "a KNOWN entry that no longer exists fails", output)
    check("KNOWN entry no longer found: idem/idem.hpp -> idem/http.hpp" in output,
          "the stale entry is named", output)

    # A header in a room the table does not know.
    include_dir = fresh_copy(folder, "roomless")
    os.makedirs(os.path.join(include_dir, "idem", "attic"))
    with open(os.path.join(include_dir, "idem", "attic", "box.hpp"), "w", encoding="utf-8") as box:
        box.write("#pragma once\n")
    rc, output = run(include_dir)
    check(rc == 1, "a header with no floor fails", output)
    check("include/idem/attic/box.hpp: no floor" in output, "the roomless header is named",
          output)

print("check_floors: all checks passed")
