#!/usr/bin/env python3
"""sp-bench's command line, as a user meets it: replay of a generated log, malformed logs
rejected with their line number, and the JSON and SVG a small serve run writes. TAP output."""
import json
import os
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


@case("gen-log and replay")
def _():
    r = run("gen-log", log, "--requests", "200", "--streams", "4", "--seed", "3")
    check("gen-log exits 0", r.returncode == 0, r.stderr)
    lines = open(log).read().splitlines()
    check("gen-log writes RMM's header", lines[0] == "Thread,Time,Action,Pointer,Size,Stream")
    allocs = sum(1 for l in lines[1:] if ",allocate," in l)
    frees = sum(1 for l in lines[1:] if ",free," in l)
    check("every allocation is freed", allocs == frees and allocs > 0, f"{allocs} {frees}")
    out = os.path.join(tmp, "replay.json")
    r = run("replay", log, "--json", out)
    check("replay exits 0", r.returncode == 0, r.stderr)
    rows = json.load(open(out))["replay"]
    check("replay has both allocators",
          sorted(x["allocator"] for x in rows) == ["cudaMallocAsync", "streampool"], rows)
    for x in rows:
        check(f"{x['allocator']}: held >= requested > 0",
              x["peak_held_bytes"] >= x["peak_requested_bytes"] > 0, x)
        check(f"{x['allocator']}: events counted", x["events"] == allocs + frees, x)
    sp = [x for x in rows if x["allocator"] == "streampool"][0]
    check("streampool: hits reported", sp["hits"] is not None and sp["hits"] > 0, sp)


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


@case("serve writes JSON and SVG")
def _():
    out, svg = os.path.join(tmp, "serve.json"), os.path.join(tmp, "serve.svg")
    r = run("serve", "--streams", "1,2", "--requests", "16", "--buffers", "4", "--work-us", "0",
            "--json", out, "--plot", svg)
    check("serve exits 0", r.returncode == 0, r.stderr)
    d = json.load(open(out))
    check("json names device and runtime", d["device"] and d["runtime"], d)
    names = {x["allocator"] for x in d["serve"]}
    check("json has the four allocators", names == {"cudaMalloc", "cudaMallocAsync",
                                                     "cudaMallocAsync (threshold max)", "streampool"}, names)
    row = d["serve"][0]
    keys = {"allocator", "streams", "requests_per_s", "p50_us", "p99_us", "peak_reserved_bytes",
            "cuda_calls_per_request"}
    check("json rows carry every figure", keys <= set(row), row)
    check("table printed", "requests/s" in r.stdout, r.stdout)
    check("svg written", open(svg).read().startswith("<svg"))
    r = run("serve", "--allocators", "nope")
    check("unknown allocator: exit 2", r.returncode == 2, r.stderr)


@case("hotpath writes its rows")
def _():
    out = os.path.join(tmp, "hot.json")
    r = run("hotpath", "--quick", "--seconds", "0.005", "--json", out)
    check("hotpath exits 0", r.returncode == 0, r.stderr)
    d = json.load(open(out))
    check("12 hotpath rows (6 sizes x 1, 2 threads)", len(d["hotpath"]) == 12, d["hotpath"])
    check("every pair cost is positive",
          all(x["ns_per_pair"] > 0 and x["malloc_ns_per_pair"] > 0 for x in d["hotpath"]))
    dims = {x["dimension"] for x in d["scaling"]}
    check("scaling over live allocations, streams, pools",
          dims == {"live_allocations", "streams", "pools"}, dims)
    if d["runtime"] == "cudasim":
        calls = {x["allocator"]: x["calls_per_1000_pairs"] for x in d["calls"]}
        check("steady state: streampool makes no CUDA call", calls.get("streampool") == 0, calls)
        check("raw cudaMallocAsync makes 2 per pair", calls.get("cudaMallocAsync") == 2000, calls)


print(f"1..{len(results)}")
for i, (name, ok, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {name}")
    if not ok:
        print(f"# {detail}")
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
