#!/usr/bin/env python3
"""The allocation trace, end to end (TAP):
- a trace of `sp-bench serve` (SP_ALLOC_CONF=trace:FILE) is valid Chrome trace-event JSON:
  required fields per phase, a counter track per pool with requested/held/reserved, timestamps
  monotonic per track, and RMM's CSV beside it names the same pools;
- a trace written by streampool, replayed by `sp-bench replay`, gives the same peak requested
  as streampool's own stats recorded during the run."""
import csv
import json
import os
import subprocess
import sys
import tempfile

import tap
from tap import check

sp_bench, workload = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="sp-trace-test-")


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def check_chrome_trace(path, label):
    """The Chrome trace-event format's rules for what streampool writes (ph M, i, C)."""
    doc = json.load(open(path, encoding="utf-8"))
    events = doc.get("traceEvents")
    check(f"{label}: a traceEvents array", isinstance(events, list) and len(events) > 0)
    problems = []
    last_ts = {}
    counters = {}
    for i, e in enumerate(events):
        for field in ("name", "ph", "pid", "tid"):
            if field not in e:
                problems.append(f"event {i} lacks {field}: {e}")
        ph = e.get("ph")
        if ph not in ("M", "i", "C"):
            problems.append(f"event {i}: unexpected phase {ph}")
            continue
        if ph == "M":
            if e["name"] not in ("process_name", "thread_name") or "name" not in e.get("args", {}):
                problems.append(f"metadata event {i}: {e}")
            continue
        if not isinstance(e.get("ts"), (int, float)):
            problems.append(f"event {i}: ts {e.get('ts')!r} is not a number")
            continue
        if ph == "i" and e.get("s") not in ("g", "p", "t"):
            problems.append(f"instant event {i}: scope {e.get('s')!r}")
        if ph == "C":
            args = e.get("args", {})
            if sorted(args) != ["held", "requested", "reserved"] or not all(
                    isinstance(v, int) and v >= 0 for v in args.values()):
                problems.append(f"counter event {i}: args {args}")
            counters.setdefault(e["name"], 0)
            counters[e["name"]] += 1
            track = ("C", e["pid"], e["name"])
        else:
            track = ("i", e["pid"], e["tid"]) if e["s"] == "t" else ("i", e["pid"])
        if e["ts"] < last_ts.get(track, -1):
            problems.append(f"event {i}: ts {e['ts']} goes back on track {track}")
        last_ts[track] = e["ts"]
    check(f"{label}: every event has the format's fields, ts monotonic per track",
          not problems, "\n".join(problems))
    return events, counters


# ---- a trace of sp-bench serve ----
serve_csv = os.path.join(tmp, "serve.csv")
env = dict(os.environ, SP_ALLOC_CONF=f"trace:{serve_csv}")
r = subprocess.run([sp_bench, "serve", "--streams", "4", "--requests", "200", "--allocators",
                    "streampool"], env=env, capture_output=True, text=True)
check("sp-bench serve with trace:FILE exits 0", r.returncode == 0, r.stderr)
header, rows = read_csv(serve_csv)
check("serve CSV: RMM's six columns first",
      header[:6] == ["Thread", "Time", "Action", "Pointer", "Size", "Stream"], header)
check("serve CSV: pool, class size and outcome after them",
      header[6:] == ["Pool", "ClassSize", "Outcome", "StreamName"], header)
allocs = sum(1 for x in rows if x[2] == "allocate")
frees = sum(1 for x in rows if x[2] == "free")
check("serve CSV: every allocation freed", allocs == frees > 0, f"{allocs} {frees}")
check("serve CSV: outcomes are hit/reuse/steal/wait/fresh/bypass",
      {x[8] for x in rows if x[2] == "allocate"} <=
      {"hit", "reuse", "steal", "wait", "fresh", "bypass"} and
      "fresh" in {x[8] for x in rows} and "hit" in {x[8] for x in rows},
      {x[8] for x in rows})
check("serve CSV: threads", len({x[0] for x in rows}) >= 2, {x[0] for x in rows})
events, counters = check_chrome_trace(serve_csv + ".json", "serve JSON")
pools = {x[6] for x in rows}
check("serve JSON: a counter track per pool",
      set(counters) == {f"pool {p}" for p in pools}, f"{counters} {pools}")
calls = [e for e in events if e["ph"] == "i" and e["name"] in ("alloc", "free")]
check("serve JSON: an instant event per call", len(calls) == len(rows), f"{len(calls)} {len(rows)}")

# ---- replay of a trace written by streampool ----
trace = os.path.join(tmp, "workload.csv")
r = subprocess.run([workload, trace], capture_output=True, text=True)
check("the traced workload runs", r.returncode == 0, r.stderr)
peak_stats = int(r.stdout.strip() or 0)
header, rows = read_csv(trace)
live, req, peak_csv = {}, 0, 0
for x in rows:
    if x[2] == "allocate":
        live[x[3]] = int(x[4])
        req += int(x[4])
        peak_csv = max(peak_csv, req)
    else:
        req -= live.pop(x[3])
check("workload CSV: every free matches an allocation of the same size",
      req == 0 and not live, f"{req} {len(live)}")
check("workload CSV: a pool name with a comma and quotes survives",
      {x[6] for x in rows} == {"default", 'kv, "cache"', "weights"}, {x[6] for x in rows})
out = os.path.join(tmp, "replay.json")
r = subprocess.run([sp_bench, "replay", trace, "--json", out], capture_output=True, text=True)
check("sp-bench replay reads the trace", r.returncode == 0, r.stderr)
replayed = json.load(open(out))["replay"] if r.returncode == 0 else []
for row in replayed:
    check(f"replay ({row['allocator']}): peak requested = streampool's requested.peak "
          f"({peak_stats})", row["peak_requested_bytes"] == peak_stats == peak_csv,
          f"replay {row['peak_requested_bytes']} stats {peak_stats} csv {peak_csv}")
check("replay ran streampool and the raw allocators",
      {"streampool", "cudaMallocAsync"} <= {row["allocator"] for row in replayed}, replayed)
check_chrome_trace(trace + ".json", "workload JSON")

tap.done()
