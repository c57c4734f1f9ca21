#!/usr/bin/env python3
"""tools/sp-trace (TAP): the exact summary of a small RMM log (RMM's own time format, six
columns only), its conversion to Perfetto JSON, a trace streampool wrote (peak = streampool's
requested.peak, pools and outcomes), the memory timeline SVG of both, and malformed input of
every kind named by file and line in one line of stderr with exit 2, never a traceback."""
import json
import os
import random
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import tap

sp_trace, workload = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="sp-trace-tool-")


def check(name, ok, detail=""):
    tap.check(name, ok, detail, lines=40)


NS = "{http://www.w3.org/2000/svg}"


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


alone_summaries = {}


def bad(name, body, words, json_body=None):
    """A malformed trace (bytes or text): every command that reads it fails with one line
    naming the file and line. A malformed Perfetto file beside a valid CSV (json_body) is
    optional: summary and timeline skip it with one warning line naming it and the line, exit
    0, and print what they print without it (issue 27 item 7)."""
    path = os.path.join(tmp, name.replace(" ", "-") + ".csv")
    with open(path, "wb") as f:
        f.write(body if isinstance(body, bytes) else body.encode())
    if json_body is not None:
        if body not in alone_summaries:  # what summary prints without a Perfetto file
            alone_summaries[body] = (path, run("summary", path).stdout)
        first, alone = alone_summaries[body]
        alone = alone.replace(first, path)
        open(path + ".json", "w").write(json_body)
        words = f"sp-trace: warning: {path}.json: {words}"
        r = run("summary", path)
        check(f"damaged Perfetto file ({name}), summary: exit 0, one warning line naming file "
              "and line, the summary without it",
              r.returncode == 0 and r.stderr.count("\n") == 1 and words in r.stderr and
              "skipped" in r.stderr and r.stdout == alone, (r.returncode, r.stderr, r.stdout))
        out = os.path.join(tmp, "damaged.svg")
        r = run("timeline", path, out)
        ok = r.returncode == 0 and r.stderr.count("\n") == 1 and words in r.stderr
        try:
            root = ET.parse(out).getroot()
            ok = ok and not [p for p in root.iter(NS + "path") if p.get("id") == "held"]
        except (OSError, ET.ParseError):
            ok = False
        check(f"damaged Perfetto file ({name}), timeline: exit 0, one warning line, an SVG "
              "without the held line", ok, (r.returncode, r.stderr))
        return
    words = f"{path}: {words}"
    commands = [("summary", path), ("timeline", path, os.path.join(tmp, "bad.svg")),
                ("convert", path, os.path.join(tmp, "bad.json"))]
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
    # one per size, by its longest-lived allocation: of the three of 1000 bytes, line 6's
    # (0.4 ms; lines 2 and 4 lived 0.3 ms)
    check("timeline: the (up to 5) largest sizes labelled by rank, size and the line of the "
          "longest-lived allocation of that size",
          allocations_of(root) == [(1, 5000, "all allocations", 3),
                                   (2, 1000, "all allocations", 6)], allocations_of(root))
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
    check("timeline: five allocations labelled, of five sizes, largest first",
          len(sizes) == 5 and sizes == sorted(set(sizes), reverse=True), allocations_of(root))
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
# ---- issue 27 item 7: one time base, a baseline, a timeline that reads on a dense trace ----
MiB = 1 << 20
SP_HEAD = "Thread,Time,Action,Pointer,Size,Stream,Pool,ClassSize,Outcome,StreamName\n"


def path_points(d):
    """The vertices of an SVG path written as M x,y L x,y ..."""
    return [tuple(float(v) for v in p.split(",")) for p in d[1:].replace("L", "").split()]


def summary_windows(text):
    """The fragmentation rows: (until s, requested, held, reserved)."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if len(f) == 7 and f[3].endswith("%") and f[6].endswith("%"):
            rows.append((float(f[0]), int(f[1]), int(f[4]), int(f[5])))
    return rows


# A trace started mid-run, as streampool writes it: 60 MiB held (64 reserved) at its start, the
# first call 2.2 s later. CSV Time and Perfetto ts count from the same start.
midrun = os.path.join(tmp, "midrun.csv")
open(midrun, "w").write(
    SP_HEAD +
    '1,2.200000,allocate,0x100,8388608,0x5,"default",8388608,fresh,\n'
    '1,2.600000,allocate,0x200,4194304,0x5,"default",4194304,hit,\n'
    '1,2.800000,free,0x200,4194304,0x5,"default",4194304,free,\n'
    '1,3.000000,free,0x100,8388608,0x5,"default",8388608,free,\n')


def counter(ts_us, req, held, res):
    return {"name": "pool default", "ph": "C", "pid": 1, "tid": 0, "ts": ts_us,
            "args": {"requested": req, "held": held, "reserved": res}}


json.dump({"traceEvents": [counter(0, 0, 60 * MiB, 64 * MiB),
                           counter(2200000, 8 * MiB, 68 * MiB, 64 * MiB),
                           counter(2600000, 12 * MiB, 72 * MiB, 80 * MiB),
                           counter(2800000, 8 * MiB, 72 * MiB, 80 * MiB),
                           counter(3000000, 0, 72 * MiB, 80 * MiB)]},
          open(midrun + ".json", "w"))
r = run("summary", midrun, "--buckets", "4")
check("mid-run trace: summary exits 0", r.returncode == 0, r.stderr)
check("mid-run trace: times from the trace's start (the peak at 2.6 s, not 0.4 s)",
      "peak requested: 12582912 bytes (12.0 MiB) at 2.600000 s" in r.stdout, r.stdout)
check("mid-run trace: every window shows what was held and reserved, from the baseline on",
      summary_windows(r.stdout) == [(0.75, 0, 60 * MiB, 64 * MiB), (1.5, 0, 60 * MiB, 64 * MiB),
                                    (2.25, 8 * MiB, 68 * MiB, 64 * MiB),
                                    (3.0, 12 * MiB, 72 * MiB, 80 * MiB)], r.stdout)
r, root = svg_of(midrun)
check("mid-run trace: timeline exits 0", r.returncode == 0 and root is not None, r.stderr)
if root is not None:
    held = [p for p in root.iter(NS + "path") if p.get("id") == "held"]
    pts = path_points(held[0].get("d")) if held else []
    bars = {int(g.get("data-size")): g.find(NS + "rect") for g in root.iter(NS + "g")
            if g.get("class") == "allocation"}
    axis_y = max(y for _, y in pts) if pts else 0
    check("mid-run timeline: the held line starts at time 0 at the baseline (above the axis)",
          pts and pts[0][0] == 90 and pts[0][1] < 70 + 420, pts[:3])
    # one time base: the held line steps up in the pixel column where the 8 MiB block's bar
    # (from the CSV) starts, at 2.2 s of the 3 s axis (x = 90 + 960 * 2.2 / 3)
    step = [x for (x, y), (x2, y2) in zip(pts, pts[1:]) if y2 < y and x2 == x]
    bar_x = float(bars[8 * MiB].get("x")) if 8 * MiB in bars else 0
    check("mid-run timeline: held steps up at 2.2 s, where the CSV's allocation starts",
          abs(bar_x - 794) < 1 and step and int(step[0]) == int(bar_x), (step, bar_x))
    # the second allocation is the peak: its numbered mark moves off the peak's dot and label
    dots = [(float(c.get("cx")), float(c.get("cy")), float(c.get("r")))
            for c in root.iter(NS + "circle")]
    peak_dot = [d for d in dots if d[2] == 4]
    marks = [d for d in dots if d[2] == 7]
    text = [t for g in root.iter(NS + "g") if g.get("id") == "peak" for t in g.iter(NS + "text")]
    tx, ty, tw = (float(text[0].get("x")), float(text[0].get("y")),
                  float(text[0].get("data-width"))) if text else (0, 0, 0)
    tx0 = tx - tw if text and text[0].get("text-anchor") == "end" else tx
    box = (tx0, ty - 11, tx0 + tw, ty + 3)

    def clears_box(m):
        nx, ny = min(max(m[0], box[0]), box[2]), min(max(m[1], box[1]), box[3])
        return (m[0] - nx) ** 2 + (m[1] - ny) ** 2 > 7 ** 2

    check("mid-run timeline: the numbered marks clear the peak's dot and its label",
          len(peak_dot) == 1 and len(marks) == 2 and text and
          all((m[0] - peak_dot[0][0]) ** 2 + (m[1] - peak_dot[0][1]) ** 2 >= 11 ** 2 and
              clears_box(m) for m in marks), (dots, box))

# the same from streampool: trace_workload holding 60 MiB before its trace starts
held_trace = os.path.join(tmp, "held60.csv")
w60 = subprocess.run([workload, held_trace, "60"], capture_output=True, text=True)
check("traced workload started with 60 MiB held runs", w60.returncode == 0, w60.stderr)
r = run("summary", held_trace, "--buckets", "5")
windows = summary_windows(r.stdout)
check("streampool mid-run trace: held and reserved at least 60 MiB in every window",
      len(windows) == 5 and all(h >= 60 * MiB and res >= 60 * MiB for _, _, h, res in windows),
      r.stdout)
first_counter = next((e for e in json.load(open(held_trace + ".json"))["traceEvents"]
                      if e["ph"] == "C"), None)
check("streampool mid-run trace: the first counter is the baseline at ts 0, 60 MiB held",
      first_counter is not None and first_counter["ts"] == 0 and
      first_counter["args"]["held"] >= 60 * MiB and first_counter["args"]["requested"] == 0,
      first_counter)

# A dense 4-thread trace: 24 MiB blocks made again and again in the first 3.5 ms (and 23 to
# 20 MiB ones beside them), then 2 s of random sizes; the held counter moves at every call.
rng = random.Random(27)
rows, counters, live = [], [], {}
req = 0
next_ptr = 0x10000


def call(t, thread, action, ptr, size):
    global req
    req += size if action == "allocate" else -size
    rows.append(f'{thread},{t:.6f},{action},{ptr:#x},{size},{0x100 * thread:#x},'
                f'"p{thread % 2}",{size},{"fresh" if action == "allocate" else "free"},\n')
    counters.append({"name": f"pool p{thread % 2}", "ph": "C", "pid": 1, "tid": 0,
                     "ts": round(t * 1e6, 3),
                     "args": {"requested": 0, "held": req + rng.randrange(64) * MiB,
                              "reserved": req + 64 * MiB}})


t = 0.0
keep = []
for i in range(40):  # the early ties, 4 threads, each freed at once but the last of each size
    t += 0.00008
    size = (24, 23, 22, 21, 20)[i % 5] * MiB
    thread = i % 4 + 1
    ptr, next_ptr = next_ptr, next_ptr + size
    call(t, thread, "allocate", ptr, size)
    if i >= 35:
        keep.append((ptr, size, thread))
    else:
        call(t + 0.00001, thread, "free", ptr, size)
for k in range(5000):
    t += 0.0004
    thread = k % 4 + 1
    if live.get(thread) and rng.random() < 0.5:
        ptr, size = live[thread].pop()
        call(t, thread, "free", ptr, size)
    else:
        size = rng.choice([rng.randrange(1, 4096) * 256, rng.randrange(1, 19) * MiB])
        ptr, next_ptr = next_ptr, next_ptr + size
        live.setdefault(thread, []).append((ptr, size))
        call(t, thread, "allocate", ptr, size)
for thread in live:
    for ptr, size in live[thread]:
        t += 0.0001
        call(t, thread, "free", ptr, size)
for ptr, size, thread in keep:
    t += 0.0001
    call(t, thread, "free", ptr, size)
dense = os.path.join(tmp, "dense.csv")
open(dense, "w").write(SP_HEAD + "".join(rows))
json.dump({"traceEvents": counters}, open(dense + ".json", "w"))
r, root = svg_of(dense)
check("dense trace: timeline exits 0", r.returncode == 0 and root is not None, r.stderr)
if root is not None:
    labelled = allocations_of(root)
    sizes = [a[1] for a in labelled]
    check("dense timeline: five labels of five distinct sizes, largest first",
          sizes == [24 * MiB, 23 * MiB, 22 * MiB, 21 * MiB, 20 * MiB], labelled)
    # each by the longest-lived allocation of its size (the one kept to the end)
    life, start = {}, {}
    for ln, line in enumerate(rows, start=2):
        f = line.split(",")
        if f[2] == "allocate":
            start[f[3]] = (float(f[1]), ln, int(f[4]))
        else:
            t0_, n0, size = start.pop(f[3])
            if float(f[1]) - t0_ > life.get(size, (-1, 0))[0]:
                life[size] = (float(f[1]) - t0_, n0)
    check("dense timeline: each label is the longest-lived allocation of its size",
          [a[3] for a in labelled] == [life[s][1] for s in sizes], (labelled, life))
    counts = [int(g.get("data-count", -1)) for g in root.iter(NS + "g")
              if g.get("class") == "allocation"]
    check("dense timeline: each label counts the allocations of its size", counts == [8] * 5,
          counts)
    marks = [(float(c.get("cx")), float(c.get("cy")), float(c.get("r")))
             for c in root.iter(NS + "circle") if c.get("class") == "marker"]
    close = [(a, b) for i, a in enumerate(marks) for b in marks[i + 1:]
             if (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2 < (a[2] + b[2]) ** 2]
    check("dense timeline: five numbered markers, none overlapping another",
          len(marks) == 5 and not close, (marks, close))
    order = [p.get("id") or ("series" if p.get("data-series") else None)
             for p in root.iter(NS + "path")]
    fills = {p.get("fill") for p in root.iter(NS + "path") if p.get("data-series")}
    held = [p for p in root.iter(NS + "path") if p.get("id") == "held"]
    check("dense timeline: the held line drawn over the areas on a white halo, in no series' "
          "colour, solid",
          held and order[-2:] == ["held-halo", "held"] and "series" in order[:-2] and
          held[0].get("stroke") not in fills and held[0].get("stroke-dasharray") is None,
          (order, fills, held and held[0].attrib))
    areas = [path_points(p.get("d")[:-2]) for p in root.iter(NS + "path") if p.get("data-series")]
    check("dense timeline: each stacked area is one step per pixel column (its envelope)",
          areas and all(len(a) <= 4 * len({int(x) for x, _ in a}) + 4 for a in areas),
          [(len(a), len({int(x) for x, _ in a})) for a in areas])
    pts = path_points(held[0].get("d")) if held else []
    columns = {int(x) for x, _ in pts}
    check("dense timeline: the held line has at most two points per pixel column, left to "
          f"right ({len(counters)} counters)",
          pts and len(pts) <= 2 * len(columns) + 2 and
          all(b[0] >= a[0] for a, b in zip(pts, pts[1:])), (len(pts), len(columns)))

tap.done()
