#!/usr/bin/env python3
"""The module graph cargo-modules prints, checked for cycles: a cross-check of
tests/module_cycles.py with rust-analyzer's name resolution, for when
cargo-modules is installed (it is not in CI: building it takes longer than
CI can spare on two cores).

    cargo modules dependencies --package strobe-broker --lib --no-externs --no-sysroot > /tmp/g.dot
    python3 tests/cargo_modules_cycles.py /tmp/g.dot

Why not `cargo modules dependencies --acyclic`: in cargo-modules 0.27 (the
newest that builds on rustc 1.95) it checks the item graph, where a type and
its own method (`Position` and `Position::new`) already form a cycle, so every
crate with an impl block fails it. This lifts each "uses" edge to the modules
of its two items (a method counts as its type's, wherever its impl block is)
and reports the strongly connected components of that module graph. Exit
status 1 when there is one.
"""
import re
import sys
from collections import defaultdict
text = open(sys.argv[1]).read()
mods = set()
for m in re.finditer(r'^\s*"([^"]+)" \[label="[^"|]*\b(mod|crate)\|', text, re.M):
    mods.add(m.group(1))
def module_of(p):
    while p and p not in mods:
        p = p.rsplit('::', 1)[0] if '::' in p else ''
    return p
edges = defaultdict(set)
why = {}
for m in re.finditer(r'^\s*"([^"]+)" -> "([^"]+)" \[label="uses"', text, re.M):
    a, b = module_of(m.group(1)), module_of(m.group(2))
    if a and b and a != b:
        # a module's own children owning it is not a use; keep uses only
        edges[a].add(b)
        why.setdefault((a, b), (m.group(1), m.group(2)))
# Tarjan
index = {}; low = {}; on = set(); st = []; out = []; c = [0]
sys.setrecursionlimit(100000)
def visit(v):
    index[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(comp)
for v in list(edges):
    if v not in index: visit(v)
print(f"{len(mods)} modules, {sum(len(v) for v in edges.values())} module edges, {len(out)} cycles")
for comp in out:
    print("cycle:", sorted(comp))
    for a in comp:
        for b in edges[a]:
            if b in comp:
                print("   ", a, "->", b, "   via", why[(a, b)])
sys.exit(1 if out else 0)
