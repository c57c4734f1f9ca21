#!/usr/bin/env python3
"""tools/sp-trace (TAP): the exact summary of a small RMM log (RMM's own time format, six
columns only), its conversion to Perfetto JSON, a trace streampool wrote (peak = streampool's
requested.peak, pools and outcomes), and malformed logs named by line."""
import json
import os
import subprocess
import sys
import tempfile

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


def bad(name, body, words):
    path = os.path.join(tmp, name + ".csv")
    open(path, "w").write(body)
    r = run("summary", path)
    check(f"malformed ({name}): exit 2 naming it", r.returncode == 2 and words in r.stderr,
          r.stderr)


head = "Thread,Time,Action,Pointer,Size,Stream\n"
bad("header", "a,b,c\n", "line 1: expected the header")
bad("action", head + "1,0.1,malloc,0x1,5,0x0\n", "line 2: action 'malloc'")
bad("double", head + "1,0.1,allocate,0x1,5,0x0\n1,0.2,allocate,0x1,5,0x0\n",
    "line 3: allocates a pointer that is still live")
bad("unknown free", head + "1,0.1,free,0x1,5,0x0\n", "line 2: frees a pointer that is not live")
print(f"1..{n}")
sys.exit(1 if failed else 0)
