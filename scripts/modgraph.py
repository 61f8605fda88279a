#!/usr/bin/env python3
"""Prints the engine's module dependency graph (one module per file, edges
from `crate::...` paths) and fails if it has a cycle, between files or
between folders (the top-level modules: tx, inode, cache, ...). Layers
must only depend downward; a parent module declaring its children is not
an edge.
    python3 scripts/modgraph.py [--dot]"""
import os, re, sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "crates", "engine", "src")


def modules():
    out = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(d, f), ROOT)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib"):
                rel = rel[:-1]
            out["::".join(rel)] = os.path.join(d, f)
    return out


def strip_tests(src):
    # Edges from #[cfg(test)] modules do not count: tests may reach up.
    i = src.find("#[cfg(test)]\nmod tests")
    src = src if i < 0 else src[:i]
    # Doc links are not dependencies.
    return re.sub(r"//[^\n]*", "", src)


def main():
    mods = modules()
    names = sorted(mods, key=len, reverse=True)
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        src = strip_tests(open(path).read())
        for p in re.findall(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+)", src):
            # super:: paths are relative; only crate:: paths are edges.
            target = next((n for n in names if n and (p == n or p.startswith(n + "::"))), None)
            if target and target != m and not m.startswith(target + "::") and target != "error":
                graph[m].add(target)
    if "--dot" in sys.argv:
        print("digraph engine {")
        for m in sorted(graph):
            for t in sorted(graph[m]):
                print(f'  "{m}" -> "{t}";')
        print("}")
    check_acyclic(graph, "module")
    folders = {}
    for m, targets in graph.items():
        top = m.split("::")[0]
        folders.setdefault(top, set())
        for t in targets:
            if t.split("::")[0] != top:
                folders[top].add(t.split("::")[0])
    check_acyclic(folders, "folder")
    print(
        f"engine module graph: {len(graph)} modules, {sum(map(len, graph.values()))} edges; "
        f"{len(folders)} folders, {sum(map(len, folders.values()))} edges between them; no cycle"
    )


def check_acyclic(graph, what):
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                cyc = stack[stack.index(t):] + [t]
                sys.exit(f"{what} cycle: " + " -> ".join(cyc))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)

main()
