#!/usr/bin/env python3
"""The house in order (issue 29), measured: layers, includes, headers, prefixes, locks, lengths.

    scripts/house.py BUILD_DIR [--check[=cycles]] [--json FILE] [--src DIR] [--nm NM]
                     [--sources FILE...]

BUILD_DIR is a Meson build directory (the library's objects are read from
BUILD_DIR/src/libstreampool.so.*.p/*.o); the object directory itself, or the built library
beside its <library>.p, also do. The sources are read from src/ beside this script's scripts/
(or --src). Only the objects of the src/*.c files that exist are read (with --sources, of
those files only, as the build names them): an object left behind by a file since renamed or
removed, or left out of this build type, is not part of the library. Python's standard library
and `nm`.

Sections, each measured the same way on any commit so that a before and an after compare:

1. Call layers. File A calls file B when A.o uses a global symbol B.o defines (`nm -P`), as
   scripts/layers.py reads it. The files bottom-up by layer (0: calls no other file; n: calls
   one of layer n-1 at most), the number of arrows and every cycle (Tarjan).
2. Include arrows that run back up. The owner of src/x.h is src/x.c if there is one; otherwise
   x.h holds only types and owns nothing. File F including "x.h" runs back up when owner(x.h)
   calls, directly or through others (section 1), F's file: F itself if a .c, owner(F) if a
   header. Then the header belongs to a file above its includer. Field accesses back up: the
   `->rt` tokens (comments and strings left out) in the files that runtime.c reaches, .c files
   and the headers they own: a low layer following a pointer up to the runtime's state. A
   heuristic by design: it counts where a file reaches up through the runtime, not every way.
3. Fan-in per header: the src/ files (.c and .h) that include it directly, and the src/*.c
   files that include it directly or through other src/ headers.
4. Headers named after their files. A function a src/*.h declares (a prototype at file scope;
   static and inline ones, and functions the header defines itself, are left out) must be
   defined by the header's namesake .c (from `nm`). A header with any defined elsewhere
   violates the rule; a header without a namesake .c that declares functions defined anywhere
   does too. Declared functions no object defines (a build type that leaves their file out, a
   macro at file scope) are listed apart, not counted.
5. Prefixes. The internal functions each object defines (global `sp__*` text symbols),
   grouped by prefix: `sp__` and the first word, sp__cache_find -> sp__cache. Files with more
   than one internal prefix, and prefixes defined in more than one file. The public `sp_*`
   API is listed apart and never counted.
6. Lock assertions. Every function defined in src/ (static, and static inline in headers,
   included) whose name ends in `_locked`, and whether its body calls `...assert_owner(`.
7. The longest function definitions in src/*.c, counted from the first line of the signature
   to the closing brace.
8. One summary line.

--json FILE writes everything as JSON. --check exits 1 on a cycle, a header-name violation, a
*_locked function without an ownership assertion, a file with more than one internal prefix or
a prefix in more than one file, naming each; --check=cycles on a cycle
only. Exit status 2 on bad input, 0 otherwise.
"""
import argparse
import bisect
import collections
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers as call_graph  # noqa: E402  the call graph: nm symbols and cycles, shared with the layers test

LONGEST = 10
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "_Static_assert", "static_assert",
            "_Alignof", "alignof", "__attribute__", "__typeof__", "typeof", "defined"}


def fail(msg):
    print(f"house.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- the objects ----

def object_dir(path):
    """The library's object directory from a build directory, an object directory or a library."""
    if os.path.isdir(path) and glob.glob(os.path.join(path, "*.o")):
        return path
    if os.path.isdir(path + ".p"):
        return path + ".p"
    found = [d for d in glob.glob(os.path.join(path, "src", "libstreampool.so.*.p"))
             if os.path.isdir(d) and glob.glob(os.path.join(d, "*.o"))]
    if not found:
        fail(f"no library objects in {path} (expected src/libstreampool.so.*.p/*.o)")
    return max(found, key=os.path.getmtime)  # after a version change the newest is the library


def nm_symbols(nm, obj):
    """(global text symbols defined, all global symbols defined, names used) of one object."""
    defined, used, text = call_graph.nm_symbols(obj, nm)
    return text, defined, used


def reach(edges, start):
    """Every file start calls, directly or through others (start itself only through a cycle)."""
    seen, todo = set(), list(edges[start])
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(edges[v])
    return seen


# ---- the sources ----

def blank(m):
    """A match replaced by spaces, its newlines kept, so that line numbers hold."""
    return re.sub(r"[^\n]", " ", m.group(0))


COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                                re.S)


def strip_comments(text):
    """Comments blanked; strings kept (an #include names its header in one)."""
    return COMMENT_OR_LITERAL.sub(lambda m: blank(m) if m.group(0)[0] == "/" else m.group(0),
                                  text)


def strip_code(text):
    """Comments, string and character literals and preprocessor lines blanked: what is left is
    the C that braces and names can be counted in."""
    text = COMMENT_OR_LITERAL.sub(blank, text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", blank, text, flags=re.M)


class Source:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            self.raw = f.read()
        self.includes = re.findall(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"',
                                   strip_comments(self.raw), re.M)
        self.code = strip_code(self.raw)
        self.functions, self.prototypes = parse_top_level(self.code)


def parse_top_level(code):
    """Function definitions [(name, first line, last line, body)] and prototypes [name] at file
    scope. A statement at depth 0 runs to a ';' or to the brace closing a function's body; a
    '{' at depth 0 opens a function's body when the text before it ends in ')' and has no '='
    (struct, enum and initializer braces are part of their statement)."""
    functions, prototypes = [], []
    i, n, start = 0, len(code), 0
    newlines = [m.start() for m in re.finditer("\n", code)]

    def line_of(off):
        return bisect.bisect_left(newlines, off) + 1

    def head_name(head):
        """The name before the first '(', unless that '(' opens a pointer to function."""
        head = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", head)
        m = re.search(r"([A-Za-z_]\w*)\s*\(\s*(\*?)", head)
        if not m or m.group(2) or m.group(1) in KEYWORDS or "(" in head[:m.start()]:
            return None
        return m.group(1)

    while i < n:
        c = code[i]
        if c == ";":
            stmt = " ".join(code[start:i].split())
            if (stmt and not re.match(r"(typedef|static|extern\s+inline)\b", stmt)
                    and "inline" not in stmt.split("(")[0] and "=" not in stmt
                    and re.search(r"\)\s*(__attribute__\s*\(\(.*\)\))?\s*$", stmt)):
                name = head_name(stmt)
                if name:
                    prototypes.append(name)
            start = i + 1
        elif c == "{":
            head = code[start:i]
            depth, j = 1, i + 1
            while j < n and depth:
                if code[j] == "{":
                    depth += 1
                elif code[j] == "}":
                    depth -= 1
                j += 1
            flat = " ".join(head.split())
            name = head_name(flat) if flat.endswith(")") and "=" not in flat else None
            if name and not re.match(r"(struct|union|enum|typedef)\b", flat):
                first = start + (len(head) - len(head.lstrip()))
                functions.append((name, line_of(first), line_of(j - 1), code[i:j]))
                start = j
            i = j
            continue
        i += 1
    return functions, prototypes


# ---- the measures ----

def measure(objdir, srcdir, nm, built=None):
    sources = {os.path.basename(p): Source(p)
               for p in sorted(glob.glob(os.path.join(srcdir, "*.c")) +
                               glob.glob(os.path.join(srcdir, "*.h")))}
    cfiles = sorted(f for f in sources if f.endswith(".c"))
    headers = sorted(f for f in sources if f.endswith(".h"))
    if not cfiles:
        fail(f"no src/*.c in {srcdir}")

    # 1. call layers
    objects = {f: os.path.join(objdir, f + ".o") for f in cfiles
               if os.path.exists(os.path.join(objdir, f + ".o")) and (built is None or f in built)}
    if not objects:
        fail(f"no object of a src/*.c file in {objdir}")
    owner_of_symbol, uses, text_syms = {}, {}, {}
    for f, obj in sorted(objects.items()):
        text, defined, used = nm_symbols(nm, obj)
        for s in defined:
            owner_of_symbol[s] = f
        uses[f], text_syms[f] = used, text
    edges, why = call_graph.call_graph(owner_of_symbol, uses)
    comps = call_graph.components(set(objects), edges)
    cycles = [c for c in comps if len(c) > 1]
    comp_of = {f: i for i, c in enumerate(comps) for f in c}
    layer = {}
    for i, c in enumerate(comps):  # each component after every one it reaches
        below = [layer[comp_of[g]] for f in c for g in edges[f] if comp_of[g] != i]
        layer[i] = 1 + max(below) if below else 0
    layers = collections.defaultdict(list)
    for i, c in enumerate(comps):
        layers[layer[i]].append(c[0] if len(c) == 1 else "[" + " ".join(c) + "]")
    reaches = {f: reach(edges, f) for f in objects}

    # 2. include arrows back up
    def owner(h):
        c = h[:-2] + ".c"
        return c if c in sources else None

    def file_of(f):
        return f if f.endswith(".c") else owner(f)

    back_up = []
    for f in sorted(sources):
        for h in sources[f].includes:
            if h not in sources or not h.endswith(".h"):
                continue
            o, mine = owner(h), file_of(f)
            if o and mine and o != mine and mine in reaches.get(o, ()):
                back_up.append({"includer": f, "header": h, "owner": o})
    below_runtime = reaches.get("runtime.c", set())
    rt_access = {}
    for f in sorted(sources):
        if file_of(f) in below_runtime:
            k = len(re.findall(r"->\s*rt\b", sources[f].code))
            if k:
                rt_access[f] = k

    # 3. fan-in
    direct = {h: sorted(f for f in sources if h in sources[f].includes) for h in headers}

    def closure(f):
        seen, todo = set(), [h for h in sources[f].includes if h in sources]
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                todo.extend(x for x in sources[h].includes if x in sources)
        return seen

    included = {f: closure(f) for f in cfiles}
    fan_in = [{"header": h, "direct": len(direct[h]),
               "c_files": len([f for f in cfiles if h in included[f]]), "includers": direct[h]}
              for h in headers]
    fan_in.sort(key=lambda r: (-r["direct"], -r["c_files"], r["header"]))

    # 4. headers named after their files
    defined_in = collections.defaultdict(set)
    for f, syms in text_syms.items():
        for s in syms:
            defined_in[s].add(f)
    header_rows, violations, undefined = [], [], []
    for h in headers:
        own = {fn[0] for fn in sources[h].functions}
        declared = sorted(set(p for p in sources[h].prototypes if p not in own))
        if not declared:
            continue
        by_file = collections.defaultdict(list)
        for fn in declared:
            where = sorted(defined_in.get(fn, ()))
            if not where:
                undefined.append({"header": h, "function": fn})
            for f in where:
                by_file[f].append(fn)
        namesake = h[:-2] + ".c"
        elsewhere = {f: fns for f, fns in by_file.items() if f != namesake}
        row = {"header": h, "namesake": namesake if namesake in sources else None,
               "declared": len(declared), "defined_by": {f: sorted(v) for f, v in by_file.items()}}
        header_rows.append(row)
        if elsewhere:
            violations.append({"header": h, "namesake": row["namesake"],
                               "elsewhere": {f: sorted(v) for f, v in sorted(elsewhere.items())}})

    # 5. prefixes
    prefixes_of, files_of_prefix, public = {}, collections.defaultdict(set), {}
    for f in sorted(text_syms):
        internal = collections.defaultdict(list)
        for s in sorted(text_syms[f]):
            if s.startswith("sp__"):
                p = "sp__" + s[4:].split("_", 1)[0]
                internal[p].append(s)
                files_of_prefix[p].add(f)
        prefixes_of[f] = {p: v for p, v in sorted(internal.items())}
        pub = sorted(s for s in text_syms[f] if s.startswith("sp_") and not s.startswith("sp__"))
        if pub:
            public[f] = pub
    multi_prefix = {f: sorted(p) for f, p in prefixes_of.items() if len(p) > 1}
    shared_prefix = {p: sorted(fs) for p, fs in sorted(files_of_prefix.items()) if len(fs) > 1}

    # 6. lock assertions
    locked = []
    for f in sorted(sources):
        for name, first, last, body in sources[f].functions:
            if name.endswith("_locked"):
                locked.append({"file": f, "line": first, "function": name,
                               "asserts": "assert_owner(" in body})
    unasserted = [r for r in locked if not r["asserts"]]

    # 7. longest functions
    lengths = [{"file": f, "line": first, "function": name, "lines": last - first + 1}
               for f in cfiles for name, first, last, _ in sources[f].functions]
    lengths.sort(key=lambda r: (-r["lines"], r["file"], r["line"]))

    summary = {"cycles": len(cycles), "back_up_includes": len(back_up),
               "rt_accesses_below_runtime": sum(rt_access.values()),
               "header_name_violations": len(violations), "multi_prefix_files": len(multi_prefix),
               "locked_without_assert": len(unasserted)}
    return {
        "objects": objdir,
        "sources": srcdir,
        "files": {"c": len(cfiles), "h": len(headers), "objects": len(objects)},
        "no_object": [f for f in cfiles if f not in objects],
        "layers": {"bottom_up": [layers[k] for k in sorted(layers)],
                   "arrows": [{"from": f, "to": g, "symbols": sorted(why[(f, g)])}
                              for f, g in sorted(why)],
                   "cycles": cycles},
        "includes": {"back_up": back_up, "rt_accesses": rt_access,
                     "below_runtime": sorted(below_runtime)},
        "fan_in": fan_in,
        "headers": {"rows": header_rows, "violations": violations, "undefined": undefined},
        "prefixes": {"by_file": prefixes_of, "multi_prefix_files": multi_prefix,
                     "shared_prefixes": shared_prefix, "public": public},
        "locks": {"locked": locked, "without_assert": unasserted},
        "longest": lengths[:LONGEST],
        "summary": summary,
    }


# ---- the report ----

def report(r):
    out = []
    w = out.append
    nc, nh = r["files"]["c"], r["files"]["h"]
    lay = r["layers"]
    w(f"1. call layers ({r['files']['objects']} files, {len(lay['arrows'])} arrows, "
      f"{len(lay['cycles'])} cycles; objects: {r['objects']})")
    for k, files in enumerate(lay["bottom_up"]):
        w(f"  layer {k:2d}: {' '.join(files)}")
    for c in lay["cycles"]:
        w(f"  CYCLE: {' '.join(c)}")
    if r["no_object"]:
        w(f"  no object (not in this build): {' '.join(r['no_object'])}")
    inc = r["includes"]
    w("")
    w(f"2. include arrows running back up: {len(inc['back_up'])} "
      "(the header's owner calls the includer's file)")
    for a in inc["back_up"]:
        w(f"  {a['includer']:20s} includes {a['header']:16s} owned by {a['owner']}")
    w(f"  ->rt accesses in files below runtime.c: {sum(inc['rt_accesses'].values())}")
    for f, k in sorted(inc["rt_accesses"].items(), key=lambda x: (-x[1], x[0])):
        w(f"  {f:20s} {k}")
    w("")
    w(f"3. fan-in per header (of {nc + nh} src files; .c files of {nc}, directly or through "
      "headers)")
    w(f"  {'header':18s} {'direct':>6s} {'.c all':>6s}")
    for row in r["fan_in"]:
        w(f"  {row['header']:18s} {row['direct']:6d} {row['c_files']:6d}")
    hd = r["headers"]
    w("")
    w(f"4. headers not named after the files that define their functions: "
      f"{len(hd['violations'])}")
    for v in hd["violations"]:
        own = v["namesake"] or "no namesake .c"
        w(f"  {v['header']} ({own}):")
        for f, fns in v["elsewhere"].items():
            more = f", +{len(fns) - 6}" if len(fns) > 6 else ""
            w(f"    {f}: {', '.join(fns[:6])}{more}")
    if hd["undefined"]:
        w("  declared, defined by no object of this build (not counted): " +
          ", ".join(f"{u['header']}:{u['function']}" for u in hd["undefined"]))
    px = r["prefixes"]
    w("")
    w(f"5. prefixes: {len(px['multi_prefix_files'])} files define more than one internal "
      f"prefix, {len(px['shared_prefixes'])} prefixes are defined in more than one file")
    for f, ps in px["multi_prefix_files"].items():
        w(f"  {f:20s} {' '.join(ps)}")
    for p, fs in px["shared_prefixes"].items():
        w(f"  {p:20s} in {' '.join(fs)}")
    w(f"  public sp_* functions (exempt): " +
      ", ".join(f"{f} {len(v)}" for f, v in px["public"].items()))
    lk = r["locks"]
    w("")
    w(f"6. *_locked functions: {len(lk['locked'])}, without assert_owner(: "
      f"{len(lk['without_assert'])}")
    for x in lk["without_assert"]:
        w(f"  {x['file']}:{x['line']} {x['function']}")
    w("")
    w(f"7. the {LONGEST} longest functions in src/*.c")
    for x in r["longest"]:
        w(f"  {x['lines']:4d}  {x['function']:28s} {x['file']}:{x['line']}")
    s = r["summary"]
    w("")
    w(f"summary: {s['cycles']} cycles, {s['back_up_includes']} include arrows back up, "
      f"{s['rt_accesses_below_runtime']} ->rt accesses below runtime.c, "
      f"{s['header_name_violations']} header-name violations, "
      f"{s['multi_prefix_files']} multi-prefix files, "
      f"{s['locked_without_assert']} *_locked without assert_owner")
    return "\n".join(out)


def check(r, what):
    """The bars --check holds: the names of those broken."""
    broken = []
    for c in r["layers"]["cycles"]:
        broken.append("cycle: " + " ".join(c))
    if what == "all":
        for v in r["headers"]["violations"]:
            broken.append(f"header {v['header']} declares functions of " +
                          ", ".join(v["elsewhere"]))
        for x in r["locks"]["without_assert"]:
            broken.append(f"{x['file']}:{x['line']} {x['function']} asserts no lock")
        for f, ps in r["prefixes"]["multi_prefix_files"].items():
            broken.append(f"{f} defines internal functions of {len(ps)} prefixes: " + ", ".join(ps))
        for px, fs in r["prefixes"]["shared_prefixes"].items():
            broken.append(f"internal prefix {px} is defined in " + ", ".join(sorted(fs)))
    return broken


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", help="Meson build directory (or the library's object directory)")
    ap.add_argument("--check", nargs="?", const="all", choices=["all", "cycles"],
                    help="exit 1 on a broken bar (all: cycles, header names, lock asserts)")
    ap.add_argument("--json", help="also write every figure to this file as JSON")
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "src"), help="the library's sources")
    ap.add_argument("--nm", default="nm", help="the nm to run")
    ap.add_argument("--sources", nargs="+", default=None,
                    help="the library's source files in this build: only their objects are read")
    a = ap.parse_args()
    built = None if a.sources is None else {os.path.basename(f) for f in a.sources}
    r = measure(object_dir(a.build), os.path.normpath(a.src), a.nm, built)
    print(report(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1, sort_keys=False)
            f.write("\n")
    if a.check:
        broken = check(r, a.check)
        if broken:
            print(f"\ncheck ({a.check}) failed:")
            for b in broken:
                print("  " + b)
            return 1
        print(f"\ncheck ({a.check}) passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
