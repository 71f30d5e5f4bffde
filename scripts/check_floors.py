#!/usr/bin/env python3
"""The floors of include/idem: a header includes only headers on its own floor or below, no two
headers include each other, and what is standard library only never reaches Asio.

Reads every header under include/idem, gives each a floor from FLOORS (the table at the top of
docs/development.md, "Layout": change the two together) and fails, listing each offence as
`file:line includes X (floor a -> floor b)`, when a header includes one on a higher floor, when
two headers include each other, when a header below the bindings without "async" in its path
includes one with it (what needs Asio is named so), or when a header has no floor in the table.
The last line is the summary:

    floors: N headers, B back-includes, M mutual, A reaching Asio

    scripts/check_floors.py                  check include/ of this checkout
    scripts/check_floors.py --include DIR    check DIR/idem instead (the test plants offences)

Standard library only; exits 0 when the floors hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The floors, from the ground up (docs/development.md, "Layout").
FLOOR_NAMES = [
    "ground",     # 0 core/, version.hpp: the standard library only
    "contracts",  # 1 what a backend, a sink or a reader implements
    "engines",    # 2 the engines and the public vocabulary they speak
    "backends",   # 3 the stores
    "faces",      # 4 the public wrappers, the relay, the reconciler
    "umbrella",   # 5 idem.hpp
    "bindings",   # 6 Asio, HTTP, gRPC, Prometheus, brokers
    "testing",    # 7 the conformance kits
]

# Path (relative to include/) -> floor. A path ending in "/" is a folder and covers everything
# under it; the longest matching entry wins, so a file named here overrides its folder.
FLOORS = {
    # 0 ground
    "idem/core/": 0,
    "idem/version.hpp": 0,
    # 1 contracts, and the asynchronous ground both async sides stand on
    "idem/store/contract.hpp": 1,
    "idem/store/async_contract.hpp": 1,
    "idem/store/batch.hpp": 1,
    "idem/store/one_commit.hpp": 1,
    "idem/outbox/": 1,
    "idem/async/": 1,
    # 2 engines, and the vocabulary of both sides (every server/ and client/ header not a face)
    "idem/server/": 2,
    "idem/client/": 2,
    "idem/outbox/detail/": 2,
    "idem/policies.hpp": 2,
    # 3 backends
    "idem/store/": 3,
    # 4 faces: each blocking face beside its asynchronous twin
    "idem/server/idempotent.hpp": 4,
    "idem/server/async_idempotent.hpp": 4,
    "idem/server/inbox.hpp": 4,
    "idem/server/async_inbox.hpp": 4,
    "idem/client/retrying.hpp": 4,
    "idem/client/async_retrying.hpp": 4,
    "idem/outbox/relay.hpp": 4,
    "idem/outbox/relay_policies.hpp": 4,
    "idem/outbox/relay_observer.hpp": 4,
    "idem/reconciler.hpp": 4,
    "idem/reconcile/": 4,
    # 5 umbrella
    "idem/idem.hpp": 5,
    # 6 bindings
    "idem/asio.hpp": 6,
    "idem/http.hpp": 6,
    "idem/http/": 6,
    "idem/grpc.hpp": 6,
    "idem/grpc/": 6,
    "idem/prometheus.hpp": 6,
    "idem/redis_streams.hpp": 6,
    "idem/redis_streams/": 6,
    # 7 testing
    "idem/testing/": 7,
}

# What needs Asio: a path with an "async" part (idem/async/, async_*.hpp, <backend>/async.hpp,
# detail/async/). Below the bindings, a header without one never includes a header with one, so
# the standard-library-only core never reaches Asio.
ASYNC_RE = re.compile(r"(^|/)async([_/.])")
FIRST_BINDING_FLOOR = 6


def needs_asio(header: str) -> bool:
    return ASYNC_RE.search(header) is not None


INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"](idem/[^>"]+)[>"]')


def floor_of(header: str) -> int | None:
    best = None
    for path, floor in FLOORS.items():
        if header == path or (path.endswith("/") and header.startswith(path)):
            if best is None or len(path) > len(best):
                best = path
    return None if best is None else FLOORS[best]


def describe(floor: int) -> str:
    return f"floor {floor} {FLOOR_NAMES[floor]}"


def read_includes(include_dir: pathlib.Path) -> dict[str, list[tuple[int, str]]]:
    """Every header under include_dir/idem -> [(line number, included idem header)]."""
    graph = {}
    for path in sorted((include_dir / "idem").rglob("*.hpp")):
        header = path.relative_to(include_dir).as_posix()
        includes = []
        with open(path, encoding="utf-8") as text:
            for number, line in enumerate(text, 1):
                match = INCLUDE_RE.match(line)
                if match:
                    includes.append((number, match.group(1)))
        graph[header] = includes
    return graph


def check(include_dir: pathlib.Path) -> tuple[list[str], str]:
    graph = read_includes(include_dir)
    problems = []
    for header in graph:
        if floor_of(header) is None:
            problems.append(f"include/{header}: no floor in FLOORS (scripts/check_floors.py and "
                            "docs/development.md, Layout: give its room one)")

    back, mutual = {}, {}
    for header, includes in graph.items():
        for number, included in includes:
            low, high = floor_of(header), floor_of(included)
            if low is not None and high is not None and high > low:
                back[f"{header} -> {included}"] = (
                    f"include/{header}:{number} includes {included} "
                    f"({describe(low)} -> {describe(high)})")
            if included != header and any(back_ == header for _, back_ in graph.get(included, [])):
                pair = " <-> ".join(sorted((header, included)))
                if pair not in mutual:
                    mutual[pair] = (f"include/{header}:{number} includes {included}, which "
                                    f"includes it back ({describe(low)} <-> {describe(high)})"
                                    if low is not None and high is not None else
                                    f"include/{header}:{number} includes {included}, which "
                                    "includes it back")

    asio_leaks = 0
    for header, includes in graph.items():
        floor = floor_of(header)
        if needs_asio(header) or floor is None or floor >= FIRST_BINDING_FLOOR:
            continue
        for number, included in includes:
            if needs_asio(included):
                asio_leaks += 1
                problems.append(f"include/{header}:{number} includes {included}, which needs "
                                "Asio: a header below the bindings without \"async\" in its "
                                "path stays standard library only")

    for found in (back, mutual):
        problems.extend(message for _, message in sorted(found.items()))

    summary = (f"floors: {len(graph)} headers, {len(back)} back-includes, {len(mutual)} mutual, "
               f"{asio_leaks} reaching Asio")
    return problems, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--include", type=pathlib.Path, default=ROOT / "include",
                        help="the folder that holds idem/ (default: include/ of this checkout)")
    args = parser.parse_args()
    if not (args.include / "idem").is_dir():
        print(f"scripts/check_floors.py: no idem/ under {args.include}", file=sys.stderr)
        return 2
    problems, summary = check(args.include)
    for problem in problems:
        print(problem)
    print(summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
