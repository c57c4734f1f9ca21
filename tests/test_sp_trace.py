#!/usr/bin/env python3
"""tools/sp-trace (TAP): the exact summary of a small RMM log (RMM's own time format, six
columns only), its conversion to Perfetto JSON, a trace streampool wrote (peak = streampool's
requested.peak, pools and outcomes), the memory timeline SVG of both, and malformed input of
every kind named by file and line in one line of stderr with exit 2, never a traceback."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sp_trace, workload = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="sp-trace-tool-")
n = failed = 0


def check(name, ok, detail=""):
    global n, failed
    n += 1
    print(("ok" if ok else "not ok") + f" {n} - {name}")
    if not ok:
        failed += 1
        for line in str(detail).splitlines()[:40]:
            print("# " + line)


def run(*args):
    return subprocess.run([sys.executable, sp_trace, *args], capture_output=True, text=True)


rmm_log = os.path.join(tmp, "rmm.csv")
open(rmm_log, "w").write(
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "7,10:00:00:000000,allocate,0x1000,1000,0x0\n"
    "7,10:00:00:000100,allocate,0x2000,5000,0x0\n"
    "8,10:00:00:000200,allocate,0x3000,1000,0x5\n"
    "7,10:00:00:000300,free,0x1000,1000,0x0\n"
    "8,10:00:00:000400,allocate,0x4000,1000,0x5\n"
    "8,10:00:00:000500,free,0x3000,1000,0x5\n"
    "7,10:00:00:000600,free,0x2000,5000,0x0\n"
    "8,10:00:00:000800,free,0x4000,1000,0x5\n")
r = run("summary", rmm_log, "--top", "2", "--buckets", "2")
check("summary of an RMM log exits 0", r.returncode == 0, r.stderr)
expect = f"""trace: {rmm_log}
events: 8 (4 allocations, 4 frees), 2 threads, 2 streams
peak requested: 7000 bytes (6.8 KiB) at 0.000200 s
top 2 sizes by count:
            1000 B  x3           2.9 KiB
            5000 B  x1           4.9 KiB
top 2 sizes by bytes:
            5000 B  x1           4.9 KiB
            1000 B  x3           2.9 KiB
fragmentation over time: per window, the peak of live requested bytes against its size classes
     until s    requested      classes  rounding
    0.000400         7000         7000      0.0%
    0.000800         7000         7000      0.0%
"""
check("summary: exact lines", r.stdout == expect, r.stdout)

out = os.path.join(tmp, "rmm.json")
r = run("convert", rmm_log, out)
check("convert exits 0", r.returncode == 0, r.stderr)
doc = json.load(open(out)) if r.returncode == 0 else {"traceEvents": []}
ev = doc["traceEvents"]
counters = [(e["ts"], e["args"]["requested"]) for e in ev if e["ph"] == "C"]
check("convert: the requested counter track",
      counters == [(0.0, 1000), (100.0, 6000), (200.0, 7000), (300.0, 6000), (400.0, 7000),
                   (500.0, 6000), (600.0, 1000), (800.0, 0)], counters)
calls = [(e["name"], e["tid"], e["args"]["size"]) for e in ev if e["ph"] == "i"]
check("convert: an instant per call on its thread's track",
      calls == [("alloc", 1, 1000), ("alloc", 1, 5000), ("alloc", 2, 1000), ("free", 1, 1000),
                ("alloc", 2, 1000), ("free", 2, 1000), ("free", 1, 5000), ("free", 2, 1000)],
      calls)
check("convert: thread names", sorted(e["args"]["name"] for e in ev if e["name"] == "thread_name")
      == ["thread 7", "thread 8"])

trace = os.path.join(tmp, "sp.csv")
w = subprocess.run([workload, trace], capture_output=True, text=True)
check("streampool's traced workload runs", w.returncode == 0, w.stderr)
r = run("summary", trace)
lines = r.stdout.splitlines()
check("summary of a streampool trace exits 0", r.returncode == 0, r.stderr)
check("summary: streampool's peak requested",
      any(l.startswith(f"peak requested: {w.stdout.strip()} bytes") for l in lines), r.stdout)
check("summary: a line per pool", sum(1 for l in lines if l.startswith("  pool ")) == 3, r.stdout)
check("summary: outcomes", any(l.startswith("outcomes: hit ") for l in lines), r.stdout)
check("summary: held and reserved from the Perfetto file",
      any("held" in l and "reserved" in l and "unused" in l for l in lines), r.stdout)
r = run("convert", trace, os.path.join(tmp, "sp.json"))
doc = json.load(open(os.path.join(tmp, "sp.json")))
check("convert: a counter track per pool of a streampool trace",
      {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"} ==
      {"pool default", 'pool kv, "cache"', "pool weights"})


def one_line_error(r, words):
    """Exit 2 and exactly one line on stderr holding `words` (no traceback)."""
    return r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr


def bad(name, body, words, json_body=None):
    """A malformed trace (bytes or text), and its Perfetto file if given: every command that
    reads it fails with one line naming the file (the CSV, or the .json beside it) and line."""
    path = os.path.join(tmp, name.replace(" ", "-") + ".csv")
    with open(path, "wb") as f:
        f.write(body if isinstance(body, bytes) else body.encode())
    if json_body is not None:
        open(path + ".json", "w").write(json_body)
        words = f"{path}.json: {words}"
    else:
        words = f"{path}: {words}"
    commands = [("summary", path), ("timeline", path, os.path.join(tmp, "bad.svg"))]
    if json_body is None:  # convert reads no Perfetto file
        commands.append(("convert", path, os.path.join(tmp, "bad.json")))
    for args in commands:
        r = run(*args)
        check(f"malformed ({name}), {args[0]}: exit 2, one line naming file and line",
              one_line_error(r, words), r.stderr)


head = "Thread,Time,Action,Pointer,Size,Stream\n"
good = head + "1,0.1,allocate,0x1,5,0x0\n1,0.2,free,0x1,5,0x0\n"
bad("header", "a,b,c\n", "line 1: expected the header")
bad("action", head + "1,0.1,malloc,0x1,5,0x0\n", "line 2: action 'malloc'")
bad("double", head + "1,0.1,allocate,0x1,5,0x0\n1,0.2,allocate,0x1,5,0x0\n",
    "line 3: allocates a pointer that is still live")
bad("unknown free", head + "1,0.1,free,0x1,5,0x0\n", "line 2: frees a pointer that is not live")
# issue 22 item 15: each of these ended in a Python traceback
bad("invalid UTF-8", head.encode() + b"1,0.1,allocate,0x1,5,0x0\n1,0.2,free,0x1,5,0x0\xff\n",
    "line 3: not valid UTF-8")
cols = "Thread,Time,Action,Pointer,Size,Stream,Pool,ClassSize\n"
bad("ClassSize not a number", cols + "1,0.1,allocate,0x1,5,0x0,p,five\n", "line 2: bad ClassSize")
bad("ClassSize with NUL", cols + "1,0.1,allocate,0x1,5,0x0,p,5\0\n", "line 2: bad ClassSize")
bad("time inf", head + "1,0.1,allocate,0x1,5,0x0\n1,inf,free,0x1,5,0x0\n", "line 3: bad time 'inf'")
bad("time 1e999", head + "1,1e999,allocate,0x1,5,0x0\n", "line 2: bad time")
bad("size of 400 digits", head + "1,0.1,allocate,0x1," + "9" * 400 + ",0x0\n",
    "line 2: size '99")
bad("size negative", head + "1,0.1,allocate,0x1,-5,0x0\n", "line 2: bad size")
bad("pointer of 400 digits", head + "1,0.1,allocate,0x" + "f" * 400 + ",5,0x0\n",
    "line 2: pointer '0xff")
bad("200 KB field", head + "1,0.1,allocate,0x1,5,0x0," + "x" * 200000 + "\n",
    "line 2: field larger than field limit")
bad("json holding []", good, "line 1: expected a JSON object", "[]")
bad("json not JSON", good, "line 2: Expecting value", '{"traceEvents": [\n nope]}')
counter = {"name": "pool a", "ph": "C", "ts": 1.0, "args": {"held": 2, "reserved": 4}}
for lacking, words in (("name", "lacks its name"), ("ts", "lacks a finite ts"),
                       ("args", "lacks its args"), ("held", "lacks a byte count 'held'"),
                       ("reserved", "lacks a byte count 'reserved'")):
    event = {k: v for k, v in counter.items() if k != lacking}
    if lacking in ("held", "reserved"):
        event["args"] = {k: v for k, v in counter["args"].items() if k != lacking}
    # the faulty event on line 3 of the file
    bad(f"counter lacking {lacking}", good, "line 3: a counter event " + words,
        '{"traceEvents": [\n' + json.dumps(counter) + ",\n" + json.dumps(event) + "\n]}")
bad("counter ts inf", good, "line 1: a counter event lacks a finite ts",
    '{"traceEvents": [{"name": "a", "ph": "C", "ts": 1e999, "args": {}}]}')
for opts, words in ((["--buckets", "0"], "--buckets must be 1 to 10000, not 0"),
                    (["--buckets", "x"], "argument --buckets: invalid int value"),
                    (["--top", "-1"], "--top must be at least 0")):
    r = run("summary", rmm_log, *opts)
    check(f"summary {' '.join(opts)}: exit 2, one line", one_line_error(r, words), r.stderr)
r = run("timeline", rmm_log)
check("timeline without OUT: exit 2, one line", one_line_error(r, "required: out"), r.stderr)
r = run("summary", os.path.join(tmp, "missing.csv"))
check("missing trace: exit 2, one line naming it", one_line_error(r, "missing.csv"), r.stderr)


def svg_of(*args):
    """Runs timeline; (result, the SVG's root element or None)."""
    out = os.path.join(tmp, "timeline.svg")
    if os.path.exists(out):
        os.remove(out)
    r = run("timeline", args[0], out, *args[1:])
    try:
        return r, ET.parse(out).getroot()
    except (OSError, ET.ParseError):
        return r, None


NS = "{http://www.w3.org/2000/svg}"


def series_of(root):
    return {p.get("data-series"): int(p.get("data-peak"))
            for p in root.iter(NS + "path") if p.get("data-series") is not None}


def allocations_of(root):
    return [(int(g.get("data-rank")), int(g.get("data-size")), g.get("data-series"),
             int(g.get("data-line"))) for g in root.iter(NS + "g")
            if g.get("class") == "allocation"]


def peak_of(root):
    g = [g for g in root.iter(NS + "g") if g.get("id") == "peak"]
    return (int(g[0].get("data-bytes")), float(g[0].get("data-time"))) if g else None


# issue 22 item 18: the memory timeline, from the small RMM log and from streampool's trace
r, root = svg_of(rmm_log)
check("timeline of an RMM log: exit 0, well-formed SVG", r.returncode == 0 and root is not None
      and root.tag == NS + "svg", r.stderr)
if root is not None:
    check("timeline: one series for a log without pools",
          series_of(root) == {"all allocations": 7000}, series_of(root))
    peak = peak_of(root)
    check("timeline: the peak marked, 7000 bytes at 0.2 ms",
          peak is not None and peak[0] == 7000 and abs(peak[1] - 0.0002) < 1e-9, peak)
    check("timeline: its (up to 5) largest allocations labelled by rank, size and line",
          allocations_of(root) == [(1, 5000, "all allocations", 3), (2, 1000, "all allocations", 2),
                                   (3, 1000, "all allocations", 4),
                                   (4, 1000, "all allocations", 6)], allocations_of(root))
r, root = svg_of(rmm_log, "--per-stream", "--label", "1")
check("timeline --per-stream: a series per allocating stream, with its peak",
      root is not None and series_of(root) == {"stream 0x0": 6000, "stream 0x5": 2000},
      (r.stderr, root is not None and series_of(root)))
check("timeline --label 1: only the largest", root is not None and
      allocations_of(root) == [(1, 5000, "stream 0x0", 3)],
      root is not None and allocations_of(root))

r, root = svg_of(trace)
summary_lines = run("summary", trace).stdout.splitlines()
pool_peaks = {}
for line in summary_lines:
    if line.startswith("  pool "):
        name, rest = line[len("  pool "):].rsplit(": peak ", 1)
        pool_peaks[name] = int(rest.split()[0])
check("timeline of a streampool trace: well-formed SVG", r.returncode == 0 and root is not None,
      r.stderr)
if root is not None:
    check("timeline: a series per pool, each with summary's peak", series_of(root) == pool_peaks,
          (series_of(root), pool_peaks))
    check("timeline: the peak is streampool's requested.peak",
          peak_of(root) is not None and peak_of(root)[0] == int(w.stdout.strip()), peak_of(root))
    held = [p for p in root.iter(NS + "path") if p.get("id") == "held"]
    check("timeline: the bytes held from the driver, from the Perfetto file",
          len(held) == 1 and int(held[0].get("data-peak")) > 0)
    sizes = [a[1] for a in allocations_of(root)]
    check("timeline: five allocations labelled, largest first",
          len(sizes) == 5 and sizes == sorted(sizes, reverse=True), allocations_of(root))
r, root = svg_of(trace, "--per-stream")
streams = {l.split(",")[5] for l in open(trace).read().splitlines()[1:] if ",allocate," in l}
check("timeline --per-stream of a streampool trace: a series per stream",
      root is not None and len(series_of(root)) == len(streams) > 1,
      (r.stderr, root is not None and series_of(root), streams))
weird = os.path.join(tmp, "weird.csv")
open(weird, "w").write("Thread,Time,Action,Pointer,Size,Stream,Pool\n"
                       '1,0.1,allocate,0x1,5,0x0,"<a&b>\x01 ""x"""\n')
r, root = svg_of(weird)
check("timeline: a pool named with markup and control characters stays well-formed",
      root is not None and series_of(root) == {'<a&b>\ufffd "x"': 5},
      (r.stderr, root is not None and series_of(root)))
print(f"1..{n}")
sys.exit(1 if failed else 0)
