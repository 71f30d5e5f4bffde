#!/usr/bin/env python3
"""The public headers of include/idem: every header outside a detail/ folder is public, so it must
declare something a user names (not only idem::detail) and have its row in docs/headers.md, the
index of public headers; and every row there must name a public header that exists.

An umbrella (a header that declares nothing and includes other idem headers, like idem.hpp) is
public too. That each public header compiles alone is the header checks' part (tests/CMakeLists.txt,
idem_add_header_check), not this script's.

    scripts/check_headers.py                     check include/ and docs/ of this checkout
    scripts/check_headers.py --list              print the public headers, one per line, and exit
    scripts/check_headers.py --include DIR --docs DIR
                                                 check DIR/idem against DIR/headers.md instead
                                                 (the test plants offences in copies)

The last line is the summary: `headers: N public, D in detail/`. Standard library only; exits 0
when every rule holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"](idem/[^>"]+)[>"]', re.M)
ROW_RE = re.compile(r"^\|\s*`(idem/[^`]+\.hpp)`", re.M)
TOKEN_RE = re.compile(r"namespace\s+([A-Za-z_][A-Za-z0-9_:]*)?\s*\{|\{|\}|[^\s{}]+")


def is_public(header: str) -> bool:
    return "/detail/" not in header


def strip_code(text: str) -> str:
    """The text without comments, string and character literals, and preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'R"(\w*)\(.*?\)\1"', '""', text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    lines, continued = [], False
    for line in text.split("\n"):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            continue
        lines.append(line)
    return "\n".join(lines)


def declares(text: str) -> tuple[bool, bool]:
    """(declares something in namespace idem outside any detail namespace, declares anything)."""
    stack: list[str | None] = []  # a namespace's name, or None for any other brace
    public, anything = False, False
    for match in TOKEN_RE.finditer(strip_code(text)):
        token = match.group(0)
        if token.startswith("namespace") and token.endswith("{"):
            stack.append(match.group(1) or "")
            continue
        if token == "{":
            stack.append(None)
            continue
        if token == "}":
            if stack:
                stack.pop()
            continue
        names = [part for entry in stack if entry for part in entry.split("::")]
        if not names or token == ";":
            continue
        anything = True
        if names[0] == "idem" and "detail" not in names:
            public = True
    return public, anything


def check(include_dir: pathlib.Path, docs_dir: pathlib.Path) -> tuple[list[str], list[str], str]:
    headers = sorted(path.relative_to(include_dir).as_posix()
                     for path in (include_dir / "idem").rglob("*.hpp"))
    public = [header for header in headers if is_public(header)]
    problems = []
    for header in public:
        text = (include_dir / header).read_text(encoding="utf-8")
        names_public, names_anything = declares(text)
        umbrella = not names_anything and INCLUDE_RE.search(text) is not None
        if not names_public and not umbrella:
            problems.append(f"include/{header}: declares only internals (idem::detail) outside a "
                            "detail/ folder: move it into its room's detail/, or make it public")

    index = docs_dir / "headers.md"
    rows = ROW_RE.findall(index.read_text(encoding="utf-8")) if index.is_file() else []
    if not index.is_file():
        problems.append(f"{index}: missing (the index of public headers)")
    for header in public:
        if header not in rows:
            problems.append(f"include/{header}: public but not in docs/headers.md (give it a row: "
                            "what it declares and which CMake target it needs)")
    for header in sorted(set(rows)):
        if header not in headers:
            problems.append(f"docs/headers.md: {header} does not exist")
        elif not is_public(header):
            problems.append(f"docs/headers.md: {header} is internal (under detail/)")
    for header in sorted({row for row in rows if rows.count(row) > 1}):
        problems.append(f"docs/headers.md: {header} has more than one row")
    summary = f"headers: {len(public)} public, {len(headers) - len(public)} in detail/"
    return problems, public, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--include", type=pathlib.Path, default=ROOT / "include",
                        help="the folder that holds idem/ (default: include/ of this checkout)")
    parser.add_argument("--docs", type=pathlib.Path, default=ROOT / "docs",
                        help="the folder that holds headers.md (default: docs/ of this checkout)")
    parser.add_argument("--list", action="store_true", help="print the public headers and exit")
    args = parser.parse_args()
    if not (args.include / "idem").is_dir():
        print(f"scripts/check_headers.py: no idem/ under {args.include}", file=sys.stderr)
        return 2
    problems, public, summary = check(args.include, args.docs)
    if args.list:
        print("\n".join(public))
        return 0
    for problem in problems:
        print(problem)
    print(summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
