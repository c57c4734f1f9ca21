#!/usr/bin/env python3
"""sp-bench's command line, as a user meets it: replay of a generated log, malformed logs
rejected with their line number, and the JSON and SVG a small serve run writes. TAP output."""
import json
import os
import xml.etree.ElementTree as ET
import subprocess
import sys
import tempfile

bench = os.path.abspath(sys.argv[1])
tmp = tempfile.mkdtemp(prefix="sp-bench-test-")
results = []


# meson test sets MALLOC_PERTURB_, which makes glibc fill every block it hands out and takes
# back: the malloc beside which hotpath measures would then be a 64 MiB memset.
env = {k: v for k, v in os.environ.items() if k != "MALLOC_PERTURB_"}


def run(*args):
    return subprocess.run([bench, *args], capture_output=True, text=True, cwd=tmp, timeout=300,
                          env=env)


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def case(name):
    def wrap(fn):
        try:
            fn()
        except Exception as e:  # a crash in one case is that case's failure
            check(name, False, repr(e))
        return fn
    return wrap


log = os.path.join(tmp, "gen.csv")
ALLOCATORS = ["cudaMalloc", "cudaMallocAsync", "cudaMallocAsync (threshold max)", "streampool"]
# serve's rows: every allocator, the request-scope row, then the preallocated ceiling
SERVE_ROWS = ALLOCATORS + ["streampool (requests)", "streampool (requests, synced)",
                           "preallocated"]
# calls_per_request_by_api's keys, in the table's order
APIS = ["driver_alloc", "driver_free", "cudaEventRecord", "cudaEventQuery", "cudaStreamWaitEvent",
        "cudaEventSynchronize", "cudaStreamQuery", "cudaStreamSynchronize", "other"]
SHAPES = ["serving", "training", "llm", "tenants", "forward"]
SMALL_TRAINING = ["--layers", "2", "--hidden", "256", "--batch", "2", "--seq", "256",
                  "--steps", "2"]
SMALL = {"serving": ["--requests", "100", "--streams", "4"],
         "training": SMALL_TRAINING,
         "forward": SMALL_TRAINING,
         "llm": ["--requests", "16", "--max-batch", "4", "--max-prompt", "128",
                 "--max-output", "32"],
         "tenants": ["--tenants", "3", "--requests", "30"]}


def balanced(path):
    """(allocations, frees) of a log, checking that each free names a live pointer."""
    live, allocs, frees = set(), 0, 0
    for line in open(path).read().splitlines()[1:]:
        f = line.split(",")
        if f[2] == "allocate":
            assert f[3] not in live, line
            live.add(f[3])
            allocs += 1
        else:
            live.remove(f[3])
            frees += 1
    return allocs, frees, len(live)


@case("gen-log shapes")
def _():
    for shape in SHAPES:
        path = os.path.join(tmp, f"{shape}.csv")
        r = run("gen-log", path, "--shape", shape, "--seed", "3", *SMALL[shape])
        check(f"gen-log {shape}: exits 0", r.returncode == 0, r.stderr)
        head = open(path).readline().strip()
        want = "Thread,Time,Action,Pointer,Size,Stream" + (",Pool" if shape == "tenants" else "")
        check(f"gen-log {shape}: RMM's header", head == want, head)
        allocs, frees, left = balanced(path)
        check(f"gen-log {shape}: every allocation freed once", allocs == frees > 0 and left == 0,
              (allocs, frees, left))
        again = os.path.join(tmp, f"{shape}-again.csv")
        run("gen-log", again, "--shape", shape, "--seed", "3", *SMALL[shape])
        check(f"gen-log {shape}: same seed, same bytes", open(path).read() == open(again).read())
        other = os.path.join(tmp, f"{shape}-other.csv")
        run("gen-log", other, "--shape", shape, "--seed", "4", *SMALL[shape])
        check(f"gen-log {shape}: another seed, another log", open(path).read() != open(other).read())
    pools = {l.split(",")[6] for l in open(os.path.join(tmp, "tenants.csv")).read().splitlines()[1:]}
    check("tenants: one pool column value per tenant", pools == {"tenant-0", "tenant-1", "tenant-2"},
          pools)
    whole = os.path.join(tmp, "llm-whole.csv")
    r = run("gen-log", whole, "--shape", "llm", "--block-tokens", "0", *SMALL["llm"])
    blocks = balanced(os.path.join(tmp, "llm.csv"))[0]
    check("llm whole-sequence buffers: fewer allocations than 16-token blocks (they double)",
          r.returncode == 0 and 0 < balanced(whole)[0] < blocks, (balanced(whole), blocks))
    check("llm whole-sequence buffers: balanced", balanced(whole)[2] == 0)
    r = run("gen-log", log, "--shape", "nope")
    check("gen-log unknown shape: exit 2", r.returncode == 2, r.stderr)


@case("gen-log forward: training's forward only, replayed with every allocation freed")
def _():
    path, train = os.path.join(tmp, "fwd.csv"), os.path.join(tmp, "fwd-train.csv")
    r = run("gen-log", path, "--shape", "forward", "--seed", "5", *SMALL_TRAINING)
    check("forward: exits 0", r.returncode == 0, r.stderr)
    run("gen-log", train, "--shape", "training", "--seed", "5", *SMALL_TRAINING)
    allocs, frees, left = balanced(path)
    check("forward: every allocation freed once", allocs == frees > 0 and left == 0,
          (allocs, frees, left))
    # 9 weights (embedding + 4 a layer); per step an input, 8 activations and a workspace a
    # layer, the logits: 9 + 2 x (1 + 2 x 9 + 1)
    check("forward: weights once, per step input, 2 layers' activations and workspaces, logits",
          allocs == 9 + 2 * (1 + 2 * 9 + 1), allocs)
    check("forward: no backward, so fewer allocations than training",
          allocs < balanced(train)[0], (allocs, balanced(train)[0]))
    live, peak, lows = 0, 0, []
    for line in open(path).read().splitlines()[1:]:
        live += 1 if line.split(",")[2] == "allocate" else -1
        peak = max(peak, live)
        if live == 9:
            lows.append(line.split(",")[2])
    check("forward: every activation kept to the step's end (peak: weights, input, 16, logits)",
          peak == 9 + 1 + 2 * 8 + 1, peak)
    check("forward: each step frees all it kept, back to the weights",
          lows == ["allocate", "free", "free"], lows)
    out = os.path.join(tmp, "fwd.json")
    r = run("replay", path, "--json", out, "--repeat", "1", "--no-capacity")
    check("forward replay: exit 0", r.returncode == 0, r.stderr)
    rows = json.load(open(out))["replay"]
    check("forward replay: every allocator, no failure, every event replayed",
          [x["allocator"] for x in rows] == ALLOCATORS and
          all(x["failures"] == 0 and x["events"] == allocs + frees for x in rows), rows)
    check("forward replay: nothing left live at the end (no warning)",
          "left memory" not in r.stderr, r.stderr)


@case("gen-log and replay")
def _():
    r = run("gen-log", log, "--requests", "200", "--streams", "4", "--seed", "3")
    check("gen-log exits 0", r.returncode == 0, r.stderr)
    allocs, frees, _ = balanced(log)
    out = os.path.join(tmp, "replay.json")
    r = run("replay", log, "--json", out, "--repeat", "2")
    check("replay exits 0", r.returncode == 0, r.stderr)
    rows = json.load(open(out))["replay"]
    check("replay rows: every allocator, the fair baseline right before streampool",
          [x["allocator"] for x in rows] == ALLOCATORS, rows)
    for x in rows:
        a = x["allocator"]
        check(f"{a}: held >= requested > 0", x["peak_held_bytes"] >= x["peak_requested_bytes"] > 0, x)
        check(f"{a}: reserved spread ordered",
              x["peak_reserved_bytes_min"] <= x["peak_reserved_bytes"] <= x["peak_reserved_bytes_max"], x)
        check(f"{a}: events counted", x["events"] == allocs + frees, x)
        check(f"{a}: no failure, a capacity at or above the peak requested",
              x["failures"] == 0 and x["capacity_bytes"] >= x["peak_requested_bytes"], x)
        check(f"{a}: the bisection's floor is below the capacity, within 1% or 1 MiB",
              x["capacity_failed_bytes"] < x["capacity_bytes"] and
              x["capacity_bytes"] - x["capacity_failed_bytes"] <=
              max(x["capacity_bytes"] // 100, 1 << 20) * 2, x)
    sp = [x for x in rows if x["allocator"] == "streampool"][0]
    check("streampool: hits reported", sp["hits"] is not None and sp["hits"] > 0, sp)
    check("streampool: out-of-memory reclaims reported", sp["oom_reclaims"] is not None, sp)
    # a device smaller than the peak requested bytes fails every allocator, and the rows stay
    r = run("replay", log, "--json", out, "--repeat", "1", "--capacity",
            str(rows[0]["peak_requested_bytes"] // 2))
    check("replay too small: exit 1", r.returncode == 1, r.stderr)
    rows = json.load(open(out))["replay"]
    check("replay too small: every row kept, with its failures",
          len(rows) == 4 and all(x["failures"] > 0 and x["capacity_bytes"] is None for x in rows),
          rows)


def bad_log(name, body, line, words):
    path = os.path.join(tmp, name + ".csv")
    open(path, "w").write(body)
    r = run("replay", path)
    check(f"malformed ({name}): exit 2", r.returncode == 2, r.returncode)
    check(f"malformed ({name}): names line {line}",
          f"line {line}:" in r.stderr and words in r.stderr, r.stderr)


@case("malformed logs")
def _():
    head = "Thread,Time,Action,Pointer,Size,Stream\n"
    ok = "0,0.1,allocate,0x1000,256,0x1\n"
    bad_log("no-header", ok, 1, "header")
    bad_log("action", head + ok + "0,0.2,grow,0x1000,512,0x1\n", 3, "action")
    bad_log("fields", head + ok + "0,0.2,free,0x1000\n", 3, "6 fields")
    bad_log("pointer", head + "0,0.1,allocate,zz,256,0x1\n", 2, "pointer")
    bad_log("size", head + "0,0.1,allocate,0x10,-4,0x1\n", 2, "size")
    bad_log("unknown-free", head + ok + "0,0.2,free,0x2000,256,0x1\n", 3, "not live")
    bad_log("double-alloc", head + ok + ok, 3, "still live")
    r = run("replay", os.path.join(tmp, "missing.csv"))
    check("missing log: exit 2", r.returncode == 2, r.stderr)
    # issue 22 item 16: a NUL byte is named as such (not as an overlong line), a size of " -1"
    # is refused (strtoull would read 2^64-1), and so is a free naming another tenant's pointer
    bad_log("nul", head + "0,0.1,allocate,0x1000,2\x0056,0x1\n", 2, "NUL byte")
    bad_log("negative-size", head + "0,0.1,allocate,0x1000, -1,0x1\n", 2, "bad size")
    bad_log("blank-size", head + "0,0.1,allocate,0x1000, 5,0x1\n", 2, "bad size")
    bad_log("other-tenant", head + "0,0.1,allocate,0x1000,256,0x1,a\n0,0.2,free,0x1000,256,0x1,b\n",
            3, "another tenant")
    # a line of 1023 characters fits no 1024-byte buffer with its newline, and is still a line
    prefix, rest = "0,0.1,allocate,0x", "1000,256,0x1"
    long_line = prefix + "0" * (1023 - len(prefix) - len(rest)) + rest
    bad_log("long-line", head + long_line.replace("allocate", "alloc!!!") + "\n", 2,
            "neither allocate nor free")


def replay_one(name, body, *extra):
    """Replays a log once by streampool on a 64 MiB device: (result, its JSON row or None)."""
    path, out = os.path.join(tmp, name + ".csv"), os.path.join(tmp, name + ".json")
    open(path, "w").write(body)
    r = run("replay", path, "--allocators", "streampool", "--repeat", "1", "--capacity",
            str(64 << 20), "--json", out, *extra)
    return r, (json.load(open(out))["replay"][0] if r.returncode == 0 else None)


@case("replay reads every number as written")
def _():
    head = "Thread,Time,Action,Pointer,Size,Stream\n"
    r, row = replay_one("decimal", head + "0,0.1,allocate,0x1000,0100,0x1\n"
                                          "0,0.2,allocate,0x2000,0x100,0x1\n")
    check("size 0100 is decimal 100, 0x100 hexadecimal 256",
          row is not None and row["peak_requested_bytes"] == 356, (r.stderr, row))
    prefix, rest = "0,0.1,allocate,0x", "1000,256,0x1"
    long_line = prefix + "0" * (1023 - len(prefix) - len(rest)) + rest
    r, row = replay_one("long-line", head + long_line + "\n")
    check("a valid line of 1023 characters replays", len(long_line) == 1023 and row is not None
          and row["peak_requested_bytes"] == 256, (r.stderr, row))


@case("replay frees a multi-tenant log's leftovers through their own pools")
def _():
    # issue 22 item 17: two tenants' allocations, never freed. Each leftover must go back to the
    # pool that made it, so the runtime can be destroyed and streampool's trace (written when
    # the runtime is destroyed) shows both allocations and both frees, each in its own pool.
    trace = os.path.join(tmp, "leftovers-trace.csv")
    saved = env.get("SP_ALLOC_CONF")
    env["SP_ALLOC_CONF"] = "trace:" + trace
    try:
        r, row = replay_one("leftovers", "Thread,Time,Action,Pointer,Size,Stream,Pool\n"
                                         "0,0.1,allocate,0x1000,256,0x1,a\n"
                                         "0,0.2,allocate,0x2000,512,0x1,b\n")
    finally:
        if saved is None:
            del env["SP_ALLOC_CONF"]
        else:
            env["SP_ALLOC_CONF"] = saved
    check("leftovers: replay exits 0 with no failure", r.returncode == 0 and row["failures"] == 0
          and "failed" not in r.stderr and "still allocated" not in r.stderr, r.stderr)
    rows = ([l.split(",") for l in open(trace).read().splitlines()[1:]]
            if os.path.exists(trace) else [])
    calls = sorted((f[2], f[4], f[6]) for f in rows)
    check("leftovers: the runtime was destroyed, its trace holds each free in its own pool",
          calls == [("allocate", "256", '"bench"'), ("allocate", "512", '"tenant-1"'),
                    ("free", "256", '"bench"'), ("free", "512", '"tenant-1"')], calls)


@case("serve writes JSON and SVG")
def _():
    out, svg = os.path.join(tmp, "serve.json"), os.path.join(tmp, "serve.svg")
    r = run("serve", "--streams", "1,2", "--requests", "4", "--warmup", "2", "--repeat", "3",
            "--buffers", "4", "--work-us", "0", "--json", out, "--plot", svg)
    check("serve exits 0", r.returncode == 0, r.stderr)
    d = json.load(open(out))
    check("json names device, runtime and machine", d["device"] and d["runtime"] and d["machine"], d)
    check("rows by streams, the fair baseline right before streampool, then preallocated",
          [(x["streams"], x["allocator"]) for x in d["serve"]] ==
          [(s, a) for s in (1, 2) for a in SERVE_ROWS], d["serve"])
    for x in d["serve"]:
        tag = f"{x['allocator']} x{x['streams']}"
        check(f"{tag}: requests per stream and warm-up",
              x["requests"] == 4 * x["streams"] and x["warmup_requests"] == 2 * x["streams"] and
              x["repeats"] == 3, x)
        for k in ("requests_per_s", "p99_us"):
            check(f"{tag}: {k} min <= median <= max", 0 < x[k]["min"] <= x[k]["median"] <= x[k]["max"], x)
        check(f"{tag}: no failures", x["failures"] == 0, x)
        base = [y for y in d["serve"] if y["streams"] == x["streams"] and
                y["allocator"] == "cudaMallocAsync (threshold max)"][0]
        want = x["requests_per_s"]["median"] / base["requests_per_s"]["median"]
        # the JSON keeps 4 decimals of the multiple and 1 of each median: allow both roundings
        check(f"{tag}: multiple against the fair baseline",
              abs(x["vs_async_threshold_max"] - want) <= 1e-3 * want + 5e-5, x)
        pre = [y for y in d["serve"] if y["streams"] == x["streams"] and
               y["allocator"] == "preallocated"][0]
        want = x["requests_per_s"]["median"] / pre["requests_per_s"]["median"]
        check(f"{tag}: multiple against the preallocated ceiling",
              abs(x["vs_preallocated"] - want) <= 1e-3 * want + 5e-5, x)
        if d["runtime"] != "cudasim":
            continue
        apis = x["calls_per_request_by_api"]
        check(f"{tag}: calls broken down by API, adding up to calls/req",
              list(apis) == APIS and all(v >= 0 for v in apis.values()) and
              abs(sum(apis.values()) - x["cuda_calls_per_request"]) <= 1e-3, x)
        check(f"{tag}: driver allocations in the breakdown",
              apis["driver_alloc"] == x["driver_allocs_per_request"], x)
        want = x["cuda_calls_per_request"] / base["cuda_calls_per_request"]
        check(f"{tag}: calls over the fair baseline's",
              abs(x["calls_vs_async_threshold_max"] - want) <= 1e-3, x)
        if x["allocator"] == "preallocated":
            check(f"{tag}: no allocator call at all", x["cuda_calls_per_request"] == 0, x)
            # with 4 buffers every slot is a metadata one, of at most 64 KiB
            check(f"{tag}: its buffers reserved for every stream",
                  x["peak_reserved_bytes"] >= x["streams"] * 4 * 65536, x)
        elif not x["allocator"].startswith("streampool"):
            check(f"{tag}: 4 driver allocations and 4 frees per request, nothing else",
                  apis == {k: (4 if k in ("driver_alloc", "driver_free") else 0) for k in APIS}, x)
        if x["allocator"].startswith("streampool"):
            check(f"{tag}: misses per request, fence queries per miss",
                  0 <= x["misses_per_request"] <= 4 and
                  (x["fence_queries_per_miss"] is None if x["misses_per_request"] == 0 else
                   abs(x["fence_queries_per_miss"] * x["misses_per_request"] -
                       apis["cudaEventQuery"]) <= 1e-3), x)
        else:
            check(f"{tag}: misses only for streampool",
                  x["misses_per_request"] is None and x["fence_queries_per_miss"] is None, x)
    check("table printed with the multiples",
          "x async" in r.stdout and "x cuda" in r.stdout and "x pre-" in r.stdout, r.stdout)
    check("calls table printed by API",
          "CUDA calls per request by API" in r.stdout and "queries" in r.stdout, r.stdout)
    for x in d["serve"]:
        tag = f"{x['allocator']} x{x['streams']}"
        rng = x.get("cuda_calls_per_request_range")
        check(f"{tag}: calls per request with their min <= median <= max",
              rng is not None and rng["min"] <= x["cuda_calls_per_request"] <= rng["max"] and
              rng["min"] <= rng["median"] <= rng["max"], x)
    page = open(svg).read()
    check("svg written, with peak reserved and calls per request panels",
          page.startswith("<svg") and "peak reserved over raw cudaMallocAsync" in page and
          "calls per request" in page and "preallocated" in page, page[:300])
    r = run("serve", "--allocators", "nope")
    check("unknown allocator: exit 2", r.returncode == 2, r.stderr)
    r = run("replay", log, "--allocators", "streampool,preallocated")
    check("replay refuses the preallocated row: exit 2",
          r.returncode == 2 and "preallocated" in r.stderr, r.stderr)
    r = run("serve", "--streams", "1", "--requests", "2", "--warmup", "1", "--repeat", "1",
            "--buffers", "2", "--work-us", "0", "--allocators", "streampool,preallocated",
            "--json", out)
    rows = json.load(open(out))["serve"]
    check("--allocators picks serve's rows; no baseline, no multiple",
          r.returncode == 0 and [x["allocator"] for x in rows] == ["streampool", "preallocated"]
          and all(x["vs_async_threshold_max"] is None and
                  x["calls_vs_async_threshold_max"] is None for x in rows), (r.stderr, rows))


@case("hotpath writes its rows")
def _():
    out = os.path.join(tmp, "hot.json")
    r = run("hotpath", "--quick", "--seconds", "0.005", "--json", out)
    check("hotpath exits 0", r.returncode == 0, r.stderr)
    d = json.load(open(out))
    check("14 hotpath rows (7 sizes x 1, 2 threads)", len(d["hotpath"]) == 14, d["hotpath"])
    check("sizes up to 64 MiB", max(x["size"] for x in d["hotpath"]) == 64 << 20, d["hotpath"])
    check("every pair cost is positive",
          all(x["ns_per_pair"] > 0 and x["malloc_ns_per_pair"] > 0 for x in d["hotpath"]))
    check("5 rounds per cell by default", all(x["repeats"] == 5 for x in d["hotpath"]), d["hotpath"])
    check("the ratio's median lies within its min-max",
          all(0 < x["ratio"]["min"] <= x["ratio"]["median"] <= x["ratio"]["max"]
              for x in d["hotpath"]), d["hotpath"])
    r = run("hotpath", "--quick", "--seconds", "0.002", "--repeat", "3", "--json", out)
    d = json.load(open(out))
    check("--repeat sets the rounds", all(x["repeats"] == 3 for x in d["hotpath"]), d["hotpath"])
    dims = {x["dimension"] for x in d["scaling"]}
    check("scaling over live allocations, streams, pools",
          dims == {"live_allocations", "streams", "pools"}, dims)
    live = [x for x in d["scaling"] if x["dimension"] == "live_allocations"]
    check("held memory grows with live allocations",
          live[-1]["held_bytes"] > live[0]["held_bytes"] >= 256 * live[0]["value"], live)
    if d["runtime"] == "cudasim":
        calls = {x["allocator"]: x["calls_per_1000_pairs"] for x in d["calls"]}
        check("steady state: streampool makes no CUDA call", calls.get("streampool") == 0, calls)
        check("raw cudaMallocAsync makes 2 per pair", calls.get("cudaMallocAsync") == 2000, calls)


SCHEMA = {
    "serve": {"allocator": str, "streams": int, "requests": int, "warmup_requests": int,
              "repeats": int, "requests_per_s": dict, "p99_us": dict, "p50_us": float,
              "peak_reserved_bytes": int, "failures": int, "vs_preallocated": float},
    "hotpath": {"size": int, "threads": int, "repeats": int, "ns_per_pair": float,
                "malloc_ns_per_pair": float, "ratio": dict, "driver_calls_per_1000_pairs": float},
    "scaling": {"dimension": str, "value": int, "ns_per_pair": float, "held_bytes": int},
    "calls": {"allocator": str, "calls_per_1000_pairs": (int, float)},
    "replay": {"allocator": str, "workload": str, "events": int, "repeats": int,
               "device_bytes": int, "failures": int, "peak_requested_bytes": int,
               "peak_held_bytes": int, "peak_reserved_bytes": int},
}


@case("all: one JSON with a schema, every shape replayed")
def _():
    out, svg = os.path.join(tmp, "all.json"), os.path.join(tmp, "all.svg")
    logs = os.path.join(tmp, "logs")
    os.mkdir(logs)
    r = run("all", "--quick", "--log-dir", logs, "--json", out, "--plot", svg)
    check("all exits 0", r.returncode == 0, r.stderr)
    d = json.load(open(out))
    check("schema_version 2", d.get("schema_version") == 2, d.get("schema_version"))
    for section, fields in SCHEMA.items():
        rows = d.get(section) or []
        check(f"all: {section} has rows", len(rows) > 0 or (section == "calls" and d["runtime"] != "cudasim"))
        bad = [(x, k) for x in rows for k, t in fields.items() if not isinstance(x.get(k), t)]
        check(f"all: {section} rows carry every field with its type", not bad, bad[:3])
    if d["runtime"] == "cudasim":
        typed = {"cuda_calls_per_request": float, "driver_allocs_per_request": float,
                 "calls_per_request_by_api": dict, "calls_vs_async_threshold_max": float}
        bad = [(x, k) for x in d["serve"] for k, t in typed.items() if not isinstance(x.get(k), t)]
        check("all: serve rows carry the calls figures (cudasim)", not bad, bad[:3])
        sp = [x for x in d["serve"] if x["allocator"] == "streampool"]
        check("all: streampool rows carry misses per request",
              sp and all(isinstance(x["misses_per_request"], float) and
                         "fence_queries_per_miss" in x for x in sp), sp)
    check("all: every shape by every allocator",
          sorted((x["workload"], x["allocator"]) for x in d["replay"]) ==
          sorted((s, a) for s in SHAPES for a in ALLOCATORS), d["replay"])
    for x in d["replay"]:
        tag = f"{x['workload']} {x['allocator']}"
        check(f"{tag}: replayed with no failure, a capacity found",
              x["failures"] == 0 and x["capacity_bytes"], x)
        if not x["capacity_bytes"]:
            continue
        # the capacity, checked from outside: one more replay on a device of exactly that size
        again = os.path.join(tmp, "again.json")
        name = "cudaMallocAsync-max" if "threshold" in x["allocator"] else x["allocator"]
        r = run("replay", os.path.join(logs, f"sp-bench-{x['workload']}.csv"), "--allocators",
                name, "--repeat", "1", "--capacity", str(x["capacity_bytes"]), "--json", again)
        y = json.load(open(again))["replay"][0]
        check(f"{tag}: zero failures at its reported capacity",
              r.returncode == 0 and y["failures"] == 0 and y["device_bytes"] == x["capacity_bytes"],
              (r.stderr, y))
    try:
        ET.parse(svg)
        well_formed = True
    except ET.ParseError as e:
        well_formed = repr(e)
    check("svg: well-formed XML", well_formed is True, well_formed)
    page = open(svg).read()
    check("svg: one page, a plot per benchmark, labelled with runtime and machine",
          page.startswith("<svg") and "requests/s" in page and "p99" in page and
          "held / peak requested" in page and "ns per alloc+free" in page and
          d["runtime"] in page and d["machine"].split(",")[0] in page, page[:300])


print(f"1..{len(results)}")
for i, (name, ok, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {name}")
    if not ok:
        print(f"# {detail}")
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
