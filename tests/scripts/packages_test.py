#!/usr/bin/env python3
"""Each script installs what its CMake configurations require.

For every script under scripts/ that configures idem with CMake, this asks the script what it
installs and how it configures (IDEM_PRINT_PACKAGES=1: scripts/lib/packages.sh prints both and
stops the script before it installs or builds anything), configures each configuration for real
in a temporary folder, reads what CMake wrote down as required (idem-required-packages.txt: one
Debian package per line with the component that needs it) and fails when the script would not
install one of them. A script that runs `cmake -S` without declaring its configurations fails
too, so a new script cannot slip past the check.

    tests/scripts/packages_test.py [--root DIR] [--script NAME]...

Prints one line per script and configuration; the last line is "all checks passed" or
"N problems". Exit status 0 or 1.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

# How each script is asked (the arguments that reach its install step), and its other modes.
SCRIPTS = {
    "test.sh": [[]],
    "demo.sh": [[], ["--store", "postgres"]],
    "serve_bench.sh": [[]],
    "bench.sh": [[]],
    "fuzz.sh": [[]],
    "pack_bench.sh": [["/tmp/idem-pack-bench-unused"]],
}


def ask(root, script, args):
    """The script's packages and configurations, as IDEM_PRINT_PACKAGES makes it print them."""
    env = dict(os.environ, IDEM_PRINT_PACKAGES="1")
    result = subprocess.run(["bash", os.path.join(root, "scripts", script), *args], env=env,
                            capture_output=True, text=True, timeout=120)
    packages, configurations = None, []
    for line in result.stdout.splitlines():
        if line.startswith("packages: "):
            packages = set(line[len("packages: "):].split())
        elif line.startswith("configure: "):
            configurations.append(line[len("configure: "):].split("\t"))
    if result.returncode != 0 or packages is None:
        raise RuntimeError(f"scripts/{script} {' '.join(args)} did not print its packages "
                           f"(exit {result.returncode}): {result.stderr.strip()[-400:]}")
    return packages, configurations


def required(root, configuration, work):
    """What CMake wrote down as required for one configuration: {package: component}."""
    build = tempfile.mkdtemp(dir=work)
    result = subprocess.run(["cmake", "-S", root, "-B", build, "-G", "Ninja", *configuration],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError("configure failed: " + result.stderr.strip()[-800:])
    needed = {}
    with open(os.path.join(build, "idem-required-packages.txt"), encoding="utf-8") as listing:
        for line in listing:
            if line.strip():
                package, component = line.rstrip("\n").split("\t")
                needed[package] = component
    return needed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))
    parser.add_argument("--script", action="append", help="check only this script (repeatable)")
    options = parser.parse_args()
    root = options.root
    problems = []

    # Every script that configures is in the table.
    for name in sorted(os.listdir(os.path.join(root, "scripts"))):
        path = os.path.join(root, "scripts", name)
        if name.endswith(".sh") and os.path.isfile(path):
            with open(path, encoding="utf-8") as text:
                if re.search(r"^\s*cmake -S", text.read(), re.M) and name not in SCRIPTS:
                    problems.append(f"scripts/{name} configures with CMake but is not checked "
                                    "here: add it to SCRIPTS")

    asked = []
    for script, modes in SCRIPTS.items():
        if options.script and script not in options.script:
            continue
        for args in modes:
            try:
                packages, configurations = ask(root, script, args)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                problems.append(str(error))
                continue
            label = " ".join([f"scripts/{script}", *args])
            if not configurations:
                problems.append(f"{label} declares no configuration (idem_configure_uses)")
            asked.append((label, packages, configurations))

    # One configure per distinct configuration, two at a time.
    distinct = sorted({tuple(c) for _, _, cs in asked for c in cs})
    with tempfile.TemporaryDirectory(prefix="idem-packages-test.") as work, \
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {c: pool.submit(required, root, list(c), work) for c in distinct}
        needs = {}
        for configuration, future in futures.items():
            try:
                needs[configuration] = future.result()
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                problems.append(f"{' '.join(configuration)}: {error}")

    for label, packages, configurations in asked:
        for configuration in configurations:
            needed = needs.get(tuple(configuration))
            if needed is None:
                continue
            missing = sorted(p for p in needed if p not in packages)
            short = " ".join(a for a in configuration if a.startswith(("-DCMAKE_CXX_COMPILER=",
                                                                       "-DIDEM_SANITIZE=",
                                                                       "-DIDEM_BUILD_")))
            print(f"{label} [{short}]: requires {len(needed)} packages, "
                  f"{'all installed' if not missing else 'MISSING ' + ' '.join(missing)}")
            for package in missing:
                problems.append(f"{label} does not install {package}, which its configuration "
                                f"requires for {needed[package]} ({' '.join(configuration)})")

    for problem in problems:
        print("problem:", problem)
    print("all checks passed" if not problems else f"{len(problems)} problems")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
