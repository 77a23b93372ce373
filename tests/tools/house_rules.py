#!/usr/bin/env python3
"""The house rules of Floe's workspace (issue #34), checked from the sources:

1. dependencies between Floe's crates: nothing depends on floe-broker; floe-storage
   and floe-client on floe-protocol only; floe-tiering on neither floe-cluster nor
   floe-coordinator;
2. no import circle between the files of a crate of more than MAX_CIRCLE files
   (tests/tools/import_circles.py);
3. no product file with more than MAX_FILE_LINES lines of product code (the code
   before its `#[cfg(test)] mod tests`; `*_tests.rs` files are tests).

It also prints each crate's share of the product lines (the broker's is a target,
not a rule: it holds the binary's CLI and console).

    python3 tests/tools/house_rules.py      # exit 1 and say which rule, if one is broken
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import import_circles  # noqa: E402

ROOT = import_circles.ROOT
MAX_CIRCLE = 2
MAX_FILE_LINES = 1200
PRODUCT = ["protocol", "client", "storage", "coordinator", "cluster", "schema", "tiering", "broker", "benches"]
# crate -> the Floe crates it may not depend on (None: it may depend on these only).
FORBIDDEN = {"tiering": {"floe-cluster", "floe-coordinator", "floe-broker"}}
ONLY = {"storage": {"floe-protocol"}, "client": {"floe-protocol"}, "protocol": set()}


def floe_dependencies(crate):
    """The floe-* crates in `crate/Cargo.toml`'s [dependencies] (not dev-, not build-)."""
    deps, section = set(), None
    for line in open(os.path.join(ROOT, crate, "Cargo.toml"), encoding="utf-8"):
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "dependencies":
            m = re.match(r"(floe-[a-z-]+)\s*[.=]", line)
            if m:
                deps.add(m.group(1))
    return deps


def product_lines(path):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^#\[cfg\(test\)\]\s*\nmod\s+\w+\s*\{", text, re.M)
    return (text[: m.start()] if m else text).count("\n")


def main():
    broken = []
    for crate in [c for c in PRODUCT if os.path.exists(os.path.join(ROOT, c, "Cargo.toml"))]:
        deps = floe_dependencies(crate)
        if "floe-broker" in deps:
            broken.append(f"{crate} depends on floe-broker")
        if crate in ONLY and deps - ONLY[crate]:
            broken.append(f"{crate} depends on {', '.join(sorted(deps - ONLY[crate]))} (may: {', '.join(sorted(ONLY[crate])) or 'none'})")
        if crate in FORBIDDEN and deps & FORBIDDEN[crate]:
            broken.append(f"{crate} depends on {', '.join(sorted(deps & FORBIDDEN[crate]))}")

    files = subprocess.check_output(["git", "ls-files", "*.rs"], cwd=ROOT, text=True).split()
    share = {}
    for f in files:
        crate = f.split("/")[0]
        if crate not in PRODUCT or f.endswith("_tests.rs") or "/tests/" in f or "/benches/" in f:
            continue
        n = product_lines(os.path.join(ROOT, f))
        share[crate] = share.get(crate, 0) + n
        if n > MAX_FILE_LINES:
            broken.append(f"{f}: {n} lines of product code (at most {MAX_FILE_LINES})")

    print("import circles:")
    worst = 0
    for crate in PRODUCT:
        for root_file, label in (("lib.rs", crate), ("main.rs", crate + " (bin)")):
            root = os.path.join(ROOT, crate, "src", root_file)
            if os.path.exists(root):
                worst = max(worst, import_circles.report(label, root))
    if worst > MAX_CIRCLE:
        broken.append(f"an import circle of {worst} files (at most {MAX_CIRCLE})")

    total = sum(share.values())
    print("\nproduct lines by crate:")
    for crate, n in sorted(share.items(), key=lambda kv: -kv[1]):
        print(f"  {crate:12} {n:6}  {100 * n / total:5.1f}%")
    print(f"  {'all':12} {total:6}")

    if broken:
        print("\nhouse rules broken:\n  " + "\n  ".join(broken))
        return 1
    print("\nhouse rules: kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
