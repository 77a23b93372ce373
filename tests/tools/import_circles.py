#!/usr/bin/env python3
"""Import circles between the files of each crate (issue #34's measure).

For every product `.rs` file (tests modules and `*_tests.rs` left out) it reads the
paths the file names (`crate::a::b`, `super::a`, `self::a`, a child module's `a::b`)
and resolves each to the file of the deepest module it reaches. A circle is a
strongly connected set of files; the report lists every circle of more than one
file, largest first, per crate.

    python3 tests/tools/import_circles.py            # every crate, report only
    python3 tests/tools/import_circles.py --max 3     # exit 1 if a circle has more than 3 files
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRATES = ["protocol", "client", "storage", "coordinator", "cluster", "schema", "tiering", "broker", "benches"]
PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}", re.S)


def product_text(text):
    # Drop a trailing `#[cfg(test)] mod tests { ... }` (by convention the last item) and comments.
    m = re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod\s+\w+\s*\{", text, re.M)
    if m:
        text = text[: m.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return text


MOD_DECL = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", re.M)


def modules(root):
    """module path (tuple) -> file, walking `mod x;` declarations from the crate root."""
    out = {(): root}
    todo = [((), root)]
    while todo:
        path, f = todo.pop()
        text = re.sub(r"//[^\n]*", "", open(f, encoding="utf-8").read())
        base = os.path.dirname(f)
        if os.path.basename(f) not in ("mod.rs", "lib.rs", "main.rs"):
            base = os.path.join(base, os.path.basename(f)[:-3])
        for name in MOD_DECL.findall(text):
            for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                if os.path.exists(cand):
                    if cand.endswith("_tests.rs") or name in ("tests", "test_util"):
                        break
                    out[path + (name,)] = cand
                    todo.append((path + (name,), cand))
                    break
    return out


REEXPORT = re.compile(r"\bpub\s+use\s+([^;]+);")


def reexports(text):
    """name -> path, for each `pub use a::b::Name;` / `pub use a::{B, C};` of a file."""
    out = {}
    for m in REEXPORT.finditer(text):
        body = " ".join(m.group(1).split())
        g = re.match(r"(.*)::\{(.*)\}$", body)
        items = [(g.group(1), i.strip()) for i in g.group(2).split(",")] if g else [(body.rsplit("::", 1)[0], body.rsplit("::", 1)[-1])]
        for prefix, item in items:
            if not item or item == "*":
                continue
            name = item.split(" as ")[-1].strip()
            out[name] = prefix + "::" + item.split(" as ")[0].strip()
    return out


def resolve(path, here, is_dir_mod, mods):
    segs = path.split("::")
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    else:
        base = here  # the module `self` names
        rest = segs[1:]
        if segs[0] == "super":
            base = base[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
    best, nxt = None, None
    cur = base
    if cur in mods:
        best = cur
    for i, s in enumerate(rest):
        cur = cur + (s,)
        if cur in mods:
            best = cur
        else:
            nxt = s
            break
    return best, nxt


def crate_graph(root):
    mods = modules(root)
    files = {v: k for k, v in mods.items()}
    texts = {f: product_text(open(f, encoding="utf-8").read()) for f in files}
    reexp = {f: reexports(t) for f, t in texts.items()}

    def target(p, here, is_dir_mod, depth=0):
        mod, nxt = resolve(p, here, is_dir_mod, mods)
        if mod is None:
            return None
        f = mods[mod]
        # A name a module only re-exports (`pub use x::Name`) leads to where it is defined.
        if nxt is not None and nxt in reexp[f] and depth < 8:
            fis = os.path.basename(f) in ("mod.rs", "lib.rs", "main.rs")
            source = reexp[f][nxt]
            if source.split("::")[0] not in ("crate", "super", "self"):
                source = "self::" + source  # a child module's item (`pub use reply::Reply`); an external crate's resolves to None
            deeper = target(source, mod, fis, depth + 1)
            if deeper is not None:
                return deeper
        return f

    graph = {f: set() for f in files}
    for f, here in files.items():
        text = REEXPORT.sub("", texts[f])  # a facade's re-exports are not its imports
        is_dir_mod = os.path.basename(f) in ("mod.rs", "lib.rs", "main.rs")
        paths = [m.group(1) for m in PATH.finditer(text)]
        for g in USE_GROUP.finditer(text):
            for item in re.split(r"[,\s]+", g.group(2)):
                item = item.strip("{} ")
                if item and re.match(r"[A-Za-z_]", item):
                    paths.append(g.group(1) + "::" + item.split("::")[0])
        # A child module's path without a prefix (`service::Reply` in a mod.rs).
        for child in MOD_DECL.findall(text):
            for m in re.finditer(r"(?<![:\w])" + child + r"::\w+", text):
                paths.append("self::" + m.group(0))
        for p in paths:
            t = target(p, here, is_dir_mod)
            if t is not None and t != f:
                graph[f].add(t)
    return graph


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def report(label, root):
    """Prints one crate's circles; returns the size of its largest."""
    circles = sorted((c for c in sccs(crate_graph(root)) if len(c) > 1), key=len, reverse=True)
    sizes = [len(c) for c in circles]
    print(f"{label:14} {len(circles)} circle(s){': sizes ' + ', '.join(map(str, sizes)) if sizes else ''}")
    for c in circles:
        names = sorted(os.path.relpath(f, os.path.dirname(root)) for f in c)
        print(f"    {len(c):3} files: {' '.join(names)}")
    return max(sizes, default=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, help="fail if any circle has more files than this")
    args = ap.parse_args()
    worst = 0
    for crate in CRATES:
        for root_file in ("lib.rs", "main.rs"):
            root = os.path.join(ROOT, crate, "src", root_file)
            if os.path.exists(root):
                worst = max(worst, report(crate if root_file == "lib.rs" else crate + " (bin)", root))
    if args.max is not None and worst > args.max:
        print(f"largest circle: {worst} files (allowed: {args.max})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
