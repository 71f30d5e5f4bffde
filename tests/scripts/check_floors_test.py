#!/usr/bin/env python3
"""scripts/check_floors.py passes on the real include/, and on a copy of it fails naming each
offence planted there: a back-include from the ground floor (core/) up to server/, two headers
that include each other, a standard-library-only header that reaches Asio, and a header in a room
with no floor."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check_floors.py")
SUMMARY = re.compile(r"^floors: (\d+) headers, (\d+) back-includes, (\d+) mutual, "
                     r"(\d+) reaching Asio$", re.M)


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
check(summary.group(2, 3, 4) == ("0", "0", "0"),
      "the real tree has no back-include, no mutual pair, nothing reaching Asio", output)

with tempfile.TemporaryDirectory() as folder:
    # A back-include: the ground floor reaching up to the server's vocabulary.
    include_dir = fresh_copy(folder, "back")
    line = add_include(include_dir, "idem/core/clock.hpp", "idem/server/outcome.hpp")
    rc, output = run(include_dir)
    check(rc == 1, "a planted back-include fails", output)
    check(f"include/idem/core/clock.hpp:{line} includes idem/server/outcome.hpp "
          "(floor 0 ground -> floor 2 engines)" in output, "the back-include is named", output)
    planted = SUMMARY.search(output)
    check(planted and planted.group(2, 3, 4) == ("1", "0", "0"), "counted as a back-include",
          output)

    # A mutual pair on one floor: observer.hpp includes outcome.hpp, planted the other way too.
    include_dir = fresh_copy(folder, "mutual")
    line = add_include(include_dir, "idem/server/outcome.hpp", "idem/server/observer.hpp")
    rc, output = run(include_dir)
    check(rc == 1, "a planted mutual include fails", output)
    check(re.search(r"include/idem/server/(outcome|observer)\.hpp:\d+ includes "
                    r"idem/server/(observer|outcome)\.hpp, which includes it back", output),
          "the mutual pair is named", output)
    check("back-include" not in output.replace("back-includes,", ""),
          "a pair on one floor is no back-include", output)

    # The server's vocabulary (floor 2) reaching the Asio selection (floor 1): no floor is
    # broken, but a standard-library-only header would need Asio.
    include_dir = fresh_copy(folder, "asio")
    line = add_include(include_dir, "idem/server/outcome.hpp", "idem/async/asio.hpp")
    rc, output = run(include_dir)
    check(rc == 1, "a standard-library-only header that includes Asio fails", output)
    check(f"include/idem/server/outcome.hpp:{line} includes idem/async/asio.hpp, which needs Asio"
          in output, "the header reaching Asio is named", output)
    planted = SUMMARY.search(output)
    check(planted and planted.group(2, 3, 4) == ("0", "0", "1"), "counted as reaching Asio",
          output)
    # The same include from an asynchronous face is what it is for.
    include_dir = fresh_copy(folder, "async_face")
    add_include(include_dir, "idem/server/async_inbox.hpp", "idem/async/asio.hpp")
    rc, output = run(include_dir)
    check(rc == 0, "an async header may include Asio", output)

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
