#!/usr/bin/env python3
"""scripts/check_headers.py passes on the real include/ and docs/, and on copies of them fails
naming each offence planted there: a public header with no row in docs/headers.md, a header
outside detail/ that declares only idem::detail, a row for a header that does not exist, and a
row for an internal one."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check_headers.py")
SUMMARY = re.compile(r"^headers: (\d+) public, (\d+) in detail/$", re.M)


def run(include_dir=None, docs_dir=None, *extra):
    command = [sys.executable, SCRIPT, *extra]
    if include_dir is not None:
        command += ["--include", include_dir, "--docs", docs_dir]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def check(condition, what, output=""):
    if not condition:
        print("FAILED:", what)
        print(output)
        sys.exit(1)


def fresh_copy(folder, name):
    include_dir = os.path.join(folder, name, "include")
    docs_dir = os.path.join(folder, name, "docs")
    shutil.copytree(os.path.join(ROOT, "include"), include_dir)
    os.makedirs(docs_dir)
    shutil.copy(os.path.join(ROOT, "docs", "headers.md"), docs_dir)
    return include_dir, docs_dir


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def add_row(docs_dir, header):
    with open(os.path.join(docs_dir, "headers.md"), "a", encoding="utf-8") as handle:
        handle.write(f"| `{header}` | planted | `idem::idem` |\n")


# The real tree: every public header has its row, none declares only internals.
rc, output = run()
check(rc == 0, "the real include/ and docs/ pass", output)
summary = SUMMARY.search(output)
check(summary is not None, "a summary line", output)
public = [line for line in run(None, None, "--list")[1].splitlines() if line]
check(len(public) == int(summary.group(1)) and all("/detail/" not in h for h in public),
      "--list prints the public headers, none under detail/", output)
check("idem/idem.hpp" in public and "idem/store/memory/detail/node.hpp" not in public,
      "the umbrella is public, a part under detail/ is not", "\n".join(public))

PUBLIC_TYPE = ("#ifndef PLANTED_HPP\n#define PLANTED_HPP\nnamespace idem {\n"
               "struct planted {};\n}  // namespace idem\n#endif\n")
DETAIL_ONLY = ("#ifndef PLANTED_HPP\n#define PLANTED_HPP\nnamespace idem {\nnamespace detail {\n"
               "struct planted {};\n}  // namespace detail\n}  // namespace idem\n#endif\n")

with tempfile.TemporaryDirectory() as folder:
    # A new public header without its row.
    include_dir, docs_dir = fresh_copy(folder, "undocumented")
    write(os.path.join(include_dir, "idem", "server", "planted.hpp"), PUBLIC_TYPE)
    rc, output = run(include_dir, docs_dir)
    check(rc == 1, "a public header without a row fails", output)
    check("include/idem/server/planted.hpp: public but not in docs/headers.md" in output,
          "the undocumented header is named", output)
    # ... and with its row, it passes.
    add_row(docs_dir, "idem/server/planted.hpp")
    rc, output = run(include_dir, docs_dir)
    check(rc == 0, "the same header with its row passes", output)

    # Internals outside detail/ (with a row, so that only this rule can fail).
    include_dir, docs_dir = fresh_copy(folder, "internal")
    write(os.path.join(include_dir, "idem", "store", "memory", "planted.hpp"), DETAIL_ONLY)
    add_row(docs_dir, "idem/store/memory/planted.hpp")
    rc, output = run(include_dir, docs_dir)
    check(rc == 1, "a header outside detail/ that declares only idem::detail fails", output)
    check("include/idem/store/memory/planted.hpp: declares only internals" in output,
          "the header of internals is named", output)
    # ... and under detail/, without a row, it passes.
    include_dir, docs_dir = fresh_copy(folder, "internal_in_detail")
    write(os.path.join(include_dir, "idem", "store", "memory", "detail", "planted.hpp"),
          DETAIL_ONLY)
    rc, output = run(include_dir, docs_dir)
    check(rc == 0, "internals under detail/ need no row", output)

    # A row for a header that is gone, and one for an internal header.
    include_dir, docs_dir = fresh_copy(folder, "stale")
    add_row(docs_dir, "idem/server/gone.hpp")
    add_row(docs_dir, "idem/store/memory/detail/node.hpp")
    rc, output = run(include_dir, docs_dir)
    check(rc == 1, "rows for a missing and an internal header fail", output)
    check("docs/headers.md: idem/server/gone.hpp does not exist" in output,
          "the missing header is named", output)
    check("docs/headers.md: idem/store/memory/detail/node.hpp is internal" in output,
          "the internal header is named", output)

print("check_headers: all checks passed")
