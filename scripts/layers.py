#!/usr/bin/env python3
"""Who calls whom among the library's source files, read from its object files; fails on a cycle.

    scripts/layers.py LIB_OR_OBJ_DIR [--sources FILE...] [--dot FILE]

LIB_OR_OBJ_DIR is the directory of the library's objects (Meson: BUILD/src/libstreampool.so.<ver>.p)
or the built library itself, whose objects Meson keeps beside it in <library>.p. File A uses file
B when A's object needs a global symbol B's object defines (`nm`). Static functions and macros
stay inside a file and are invisible here: what is seen is what one file takes from another
through the linker, which is what the layering in ../shared/DESIGN.md ("Layers") is about.

With --sources, only the objects of those source files are read: an object left behind in the
directory by a file since renamed or removed is no longer part of the library.

Prints the files bottom-up (each after everything it uses; a bracket is a cycle), every arrow
with the names that make it, and every cycle. Exit status 1 on a cycle, 2 on bad input, 0
otherwise: the `layers` test suite runs it on every build so that a call back up cannot return.
"""
import argparse
import collections
import os
import subprocess
import sys


def object_dir(path):
    if os.path.isdir(path):
        return path
    if os.path.isdir(path + ".p"):
        return path + ".p"
    sys.exit(f"layers.py: neither an object directory nor a library beside one: {path}")


def nm_symbols(obj, nm="nm"):
    """(defined globals, undefined names, defined functions) of one object file."""
    run = subprocess.run([nm, "-P", obj], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"layers.py: nm failed on {obj}: {run.stderr.strip()}")
    defined, used, text = set(), set(), set()
    for line in run.stdout.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper() and kind not in "NW":  # T, D, B, R, C...: a global definition
            defined.add(name)
            if kind == "T":
                text.add(name)
    return defined, used, text


def components(nodes, edges):
    """Strongly connected components (Tarjan, iterative), each after every one it reaches."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def call_graph(owner, uses):
    """The arrows A -> B (A uses a symbol B defines), and the names behind each, from `owner`
    (symbol -> the file defining it) and `uses` (file -> the names it uses)."""
    edges, why = collections.defaultdict(set), collections.defaultdict(set)
    for f, used in uses.items():
        for sym in used:
            g = owner.get(sym)
            if g and g != f:
                edges[f].add(g)
                why[(f, g)].add(sym)
    return edges, why


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="object directory, or the library beside its <library>.p")
    ap.add_argument("--sources", nargs="+", default=None,
                    help="the library's source files: only their objects are read")
    ap.add_argument("--dot", help="also write the graph for Graphviz")
    args = ap.parse_args()
    objdir = object_dir(args.path)
    objects = sorted(f for f in os.listdir(objdir) if f.endswith(".o"))
    if args.sources is not None:
        wanted = {os.path.basename(src) + ".o" for src in args.sources}
        missing = sorted(wanted - set(objects))
        if missing:
            print(f"layers.py: no object for {', '.join(missing)} in {objdir}", file=sys.stderr)
            return 2
        objects = sorted(wanted)
    if not objects:
        print(f"layers.py: no object files in {objdir}", file=sys.stderr)
        return 2
    owner, uses = {}, {}
    for obj in objects:
        name = obj[:-2]  # alloc.c.o -> alloc.c
        defined, used, _ = nm_symbols(os.path.join(objdir, obj))
        for sym in defined:
            owner[sym] = name
        uses[name] = used
    edges, why = call_graph(owner, uses)
    comps = components(set(uses), edges)
    cycles = [c for c in comps if len(c) > 1]
    print("files, each after what it uses (a bracket is a cycle):")
    for c in comps:
        print("  " + (c[0] if len(c) == 1 else "[" + " ".join(c) + "]"))
    print(f"arrows ({len(why)}):")
    for f, g in sorted(why):
        names = sorted(why[(f, g)])
        more = f", +{len(names) - 4}" if len(names) > 4 else ""
        print(f"  {f} -> {g}: {', '.join(names[:4])}{more}")
    if args.dot:
        with open(args.dot, "w") as d:
            d.write("digraph layers {\n")
            for f, g in sorted(why):
                d.write(f'  "{f}" -> "{g}";\n')
            d.write("}\n")
    if cycles:
        print(f"{len(cycles)} cycle(s): " + "; ".join(" ".join(c) for c in cycles))
        return 1
    print("no cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
