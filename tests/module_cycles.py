#!/usr/bin/env python3
"""Fails when a source file of a crate imports another that imports it back,
directly or through others: the house rule of docs/architecture.md ("the
broker reads top-down"). `cargo modules dependencies --acyclic` answers the
same question with rust-analyzer; this script needs only Python, so CI runs it
on every change (tests/run-all.sh).

The graph: a node per `.rs` file under a crate's `src/` (the root package's
`src/` too). File A depends on file B when A names an item defined in B, in a
`use` or in a path in the code (`crate::x::Y`, `super::Y`, `self::x::Y`, or
`x::Y` where `x` is a child module of A). Re-exports (`pub use`,
`pub(crate) use`) are followed to the file that defines the item and are not
edges themselves unless the file's own code uses the name: a parent that
only re-exports its children's items does not depend on them. A parent declaring `mod child;` is ownership, not an edge; a
path to a module (not an item in it) is an edge to that module's file.

Usage: tests/module_cycles.py [ROOT]     (ROOT defaults to the repository)
       tests/module_cycles.py --graph CRATE_DIR   prints the file edges
       tests/module_cycles.py --self-test         checks the checker on small
                                                  crates with known answers
Exit status 1, with every cycle found, when the graph has a cycle.
"""

import os
import re
import sys

ITEM_RE = re.compile(
    r"\b(?:struct|enum|trait|type|fn|const|static|union)\s+([A-Za-z_][A-Za-z0-9_]*)"
)
MACRO_RE = re.compile(r"\bmacro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)")
MOD_DECL_RE = re.compile(
    r"()(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;"
)
INLINE_MOD_RE = re.compile(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")
USE_RE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);", re.S)
PATH_RE = re.compile(r"(?<![A-Za-z0-9_:])((?:[A-Za-z_][A-Za-z0-9_]*)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")


def strip(src):
    """Source with comments, strings and char literals blanked (newlines and
    braces of code kept), so that braces and paths can be found by regex."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c in "rb" and re.match(r"(?:br|r)#*\"", src[i:i + 12]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r"(?:br|r)(#*)\"", src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", src[i:])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d as e, *}}` -> [['a','b'], ['a','c','d'], ['a','c','*']]."""
    tree = re.sub(r"\s+", "", tree)
    if tree.startswith("::"):
        tree = tree[2:]

    def parse(s, prefix):
        res = []
        depth, start = 0, 0
        parts = []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for p in parts:
            if not p:
                continue
            b = p.find("{")
            if b >= 0:
                head = [x for x in p[:b].split("::") if x]
                res += parse(p[b + 1:p.rfind("}")], prefix + head)
            else:
                segs = p.split("::")
                last = segs[-1]
                alias = None
                if "as" in last and re.match(r".+as[A-Za-z_]", last):
                    # whitespace was removed: "dasE" is ambiguous, so the
                    # original text is consulted by the caller instead.
                    pass
                res.append(prefix + segs)
        return res

    return parse(tree, [])


class Module:
    def __init__(self, path, file, parent):
        self.path = path          # ['crate', 'a', 'b']
        self.file = file          # the file that holds the module
        self.parent = parent
        self.children = {}        # name -> Module (file modules)
        self.items = set()        # names defined here
        self.reexports = []       # (name or '*', [segments]) from pub use
        self.uses = []            # (segments, line) private use
        self.code_paths = []      # (segments, line) paths in code
        self.inline_super = []    # (segments, line) paths under inline mods


def load_crate(src_dir, root_file):
    modules = {}

    def load(path, file, parent):
        m = Module(path, file, parent)
        modules[tuple(path)] = m
        text = open(file, encoding="utf-8").read()
        code = strip(text)
        m.text = code
        # children: file modules declared with `mod x;`
        here = os.path.dirname(file)
        base = os.path.basename(file)
        if base in ("mod.rs", "lib.rs", "main.rs"):
            child_dir = here
        else:
            child_dir = os.path.join(here, base[:-3])
        for mm in MOD_DECL_RE.finditer(code):
            name = mm.group(2)
            pa = re.search(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*$', text[max(0, mm.start() - 300):mm.start()])
            if pa:
                cand = [os.path.join(here, pa.group(1))]
            else:
                cand = [os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name, "mod.rs")]
            for c in cand:
                if os.path.exists(c):
                    m.children[name] = load(path + [name], c, m)
                    break
            else:
                raise SystemExit(f"module_cycles: {file}: cannot find the file of `mod {name};`")
        return m

    load(["crate"], root_file, None)
    for m in modules.values():
        scan(m)
    return modules


def scan(m):
    code = m.text
    # mark which offsets lie inside inline `mod x { ... }` blocks
    inline = [0] * (len(code) + 1)
    for im in INLINE_MOD_RE.finditer(code):
        depth, j = 0, im.end() - 1
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        for k in range(im.start(), j + 1):
            inline[k] += 1
    for im in ITEM_RE.finditer(code):
        if not inline[im.start()]:
            m.items.add(im.group(1))
    for im in MACRO_RE.finditer(code):
        m.items.add(im.group(1))
    use_spans = []
    for um in USE_RE.finditer(code):
        use_spans.append((um.start(), um.end()))
        line = code.count("\n", 0, um.start()) + 1
        raw = um.group(2)
        for segs in expand_use(raw):
            # `x as y`: whitespace was squeezed out; recover the alias
            name = segs[-1]
            alias = None
            am = re.match(r"^(.*?)as([A-Za-z_][A-Za-z0-9_]*)$", name)
            if am and re.search(r"\b" + re.escape(am.group(1)) + r"\s+as\s+" + re.escape(am.group(2)) + r"\b", raw):
                segs = segs[:-1] + [am.group(1)]
                alias = am.group(2)
            if um.group(1) and not inline[um.start()]:
                # A re-export is an import too (cargo-modules draws it as a
                # "uses" edge): a parent that re-exports a child's item
                # depends on that child.
                m.reexports.append((alias or segs[-1], segs))
                m.uses.append((segs, line))
            elif inline[um.start()]:
                m.inline_super.append((segs, line, inline[um.start()]))
            else:
                m.uses.append((segs, line))
    for pm in PATH_RE.finditer(code):
        s = pm.start()
        if any(a <= s < b for a, b in use_spans):
            continue
        segs = re.sub(r"\s+", "", pm.group(1)).split("::")
        line = code.count("\n", 0, s) + 1
        if inline[s]:
            m.inline_super.append((segs, line, inline[s]))
        else:
            m.code_paths.append((segs, line))


def resolve(modules, m, segs, inline_depth=0, seen=None):
    """The module that defines what `segs` names, seen from module m, or None
    when the path leaves the crate (another crate, std, a local name)."""
    if seen is None:
        seen = set()
    key = (tuple(m.path), tuple(segs))
    if key in seen:
        return None
    seen.add(key)
    cur = None
    rest = list(segs)
    first = rest[0]
    if first == "crate":
        cur, rest = modules[("crate",)], rest[1:]
    elif first == "self":
        cur, rest = m, rest[1:]
    elif first == "super":
        cur = m
        while rest and rest[0] == "super":
            if inline_depth > 0:
                inline_depth -= 1
            else:
                cur = cur.parent
                if cur is None:
                    return None
            rest = rest[1:]
    elif first in m.children:
        cur, rest = m.children[first], rest[1:]
    else:
        # a name brought in by this module's own `use` (e.g. `use crate::topic;`
        # then `topic::Topic`)
        for u, _ in m.uses + [(s, 0) for _, s in m.reexports]:
            if u and u[-1] == first and u[0] in ("crate", "self", "super") or (u and u[-1] == first and u[0] in m.children):
                target = resolve(modules, m, u + rest[1:], 0, seen)
                return target
        return None
    while rest:
        name = rest[0]
        if name in cur.children:
            cur, rest = cur.children[name], rest[1:]
            continue
        if name == "*" or name == "self":
            return cur
        if name in cur.items:
            return cur
        for alias, target in cur.reexports:
            if alias == name:
                # `None`: re-exported from another crate (`pub use other::X`).
                return resolve(modules, cur, target[:-1] + [target[-1]] + rest[1:], 0, seen)
        for alias, target in cur.reexports:
            if alias == "*":
                t = resolve(modules, cur, target[:-1] + rest, 0, seen)
                if t is not None:
                    return t
        return cur
    return cur


def graph(modules):
    edges = {}
    for m in modules.values():
        out = edges.setdefault(m.file, {})
        for segs, line in m.uses + m.code_paths:
            if segs[0] not in ("crate", "self", "super") and segs[0] not in m.children:
                if not any(u and u[-1] == segs[0] for u, _ in m.uses):
                    continue
            t = resolve(modules, m, segs)
            if t is not None and t.file != m.file:
                out.setdefault(t.file, (line, "::".join(segs)))
        for segs, line, depth in m.inline_super:
            if segs[0] not in ("crate", "self", "super"):
                continue
            t = resolve(modules, m, segs, inline_depth=depth)
            if t is not None and t.file != m.file:
                out.setdefault(t.file, (line, "::".join(segs)))
    return edges


def cycles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def crates(root):
    res = []
    cdir = os.path.join(root, "crates")
    for name in sorted(os.listdir(cdir)):
        src = os.path.join(cdir, name, "src")
        if os.path.isdir(src):
            res.append(src)
    res.append(os.path.join(root, "src"))
    return res


def roots(src):
    out = []
    for f in ("lib.rs", "main.rs"):
        p = os.path.join(src, f)
        if os.path.exists(p):
            out.append(p)
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        out += [os.path.join(bins, f) for f in sorted(os.listdir(bins)) if f.endswith(".rs")]
    return out


SELF_TESTS = [
    # (name, files, expected cycle count)
    ("siblings", {"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                  "b.rs": "use crate::a::A;\npub struct B;\n"}, 1),
    ("one way", {"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                 "b.rs": "pub struct B;\n"}, 0),
    ("parent and child", {"lib.rs": "mod x;\n", "x/mod.rs": "mod c;\nuse c::C;\npub struct P(C);\n",
                          "x/c.rs": "use super::P;\npub struct C;\nfn f(_: P) {}\n"}, 1),
    ("a re-export is an edge", {"lib.rs": "mod x;\n", "x/mod.rs": "mod c;\npub use c::C;\npub struct P;\n",
                                "x/c.rs": "use super::P;\npub struct C(P);\n"}, 1),
    ("re-exports followed to the definition", {"lib.rs": "mod x;\nmod y;\n",
                                               "x/mod.rs": "mod c;\nmod d;\npub use c::C;\n",
                                               "x/c.rs": "pub struct C;\n",
                                               "x/d.rs": "use super::C;\n",
                                               "y.rs": "use crate::x::C;\n"}, 0),
    ("a re-export the file uses is one", {"lib.rs": "mod x;\n", "x/mod.rs": "mod c;\npub use c::C;\npub struct P(C);\n",
                                          "x/c.rs": "use super::P;\npub struct C;\nfn f(_: P) {}\n"}, 1),
    ("through the crate root's re-export", {"lib.rs": "mod a;\nmod b;\npub use b::B;\n",
                                            "a.rs": "use crate::B;\npub struct A;\n",
                                            "b.rs": "pub struct B;\nfn f(_: crate::a::A) {}\n"}, 1),
    ("a path in code, three files", {"lib.rs": "mod a;\nmod b;\nmod c;\n",
                                     "a.rs": "pub fn fa() { crate::b::fb() }\n",
                                     "b.rs": "pub fn fb() { crate::c::fc() }\n",
                                     "c.rs": "pub fn fc() { crate::a::fa() }\n"}, 1),
    ("tests' super is the file itself", {"lib.rs": "mod a;\nmod b;\n",
                                         "a.rs": "pub struct A;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    mod deep {\n        use super::super::A;\n    }\n}\n",
                                         "b.rs": "use crate::a::A;\n"}, 0),
    ("a test module's import counts", {"lib.rs": "mod a;\nmod b;\n",
                                       "a.rs": "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n",
                                       "b.rs": "pub struct B;\nuse crate::a::A;\n"}, 1),
    ("comments and strings are not code", {"lib.rs": "mod a;\nmod b;\n",
                                           "a.rs": "// crate::b::B\nconst S: &str = \"crate::b::B {\";\npub struct A;\n",
                                           "b.rs": "use crate::a::A;\npub struct B;\n"}, 0),
]


def self_test():
    import tempfile
    failed = 0
    for name, files, want in SELF_TESTS:
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                path = os.path.join(d, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            got = len(cycles(graph(load_crate(d, os.path.join(d, "lib.rs")))))
            if got != want:
                failed += 1
                print(f"module_cycles self-test {name!r}: {got} cycle(s), expected {want}")
    if failed:
        return 1
    print(f"module_cycles: self-test passed ({len(SELF_TESTS)} cases)")
    return 0


def main():
    args = sys.argv[1:]
    if args and args[0] == "--self-test":
        return self_test()
    if args and args[0] == "--graph":
        src = os.path.join(args[1], "src") if os.path.isdir(os.path.join(args[1], "src")) else args[1]
        for r in roots(src):
            e = graph(load_crate(src, r))
            for a in sorted(e):
                for b, (line, what) in sorted(e[a].items()):
                    print(f"{os.path.relpath(a, src)}:{line} -> {os.path.relpath(b, src)}  ({what})")
        return 0
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = 0
    files = 0
    for src in crates(root):
        for r in roots(src):
            modules = load_crate(src, r)
            files += len({m.file for m in modules.values()})
            e = graph(modules)
            for comp in cycles(e):
                bad += 1
                rel = [os.path.relpath(f, root) for f in comp]
                print(f"cycle among {len(comp)} files:")
                for a in comp:
                    for b, (line, what) in sorted(e[a].items()):
                        if b in comp:
                            print(f"  {os.path.relpath(a, root)}:{line} -> {os.path.relpath(b, root)}  ({what})")
    if bad:
        print(f"module_cycles: {bad} cycle(s) in the import graph of {files} files")
        return 1
    print(f"module_cycles: no file imports one that imports it back ({files} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
