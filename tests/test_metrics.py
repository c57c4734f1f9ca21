#!/usr/bin/env python3
"""sp_runtime_metrics_prometheus: the text passes `promtool check metrics` and, parsed back with
prometheus-client's text parser, gives exactly sp_pool_stats' figures for every pool (names with
quotes, backslashes and UTF-8 included), with # HELP/# TYPE for every family. Exit 77 (skipped)
if promtool or prometheus_client is missing here (a failure under CI=true); scripts/setup.sh
installs both when run as root."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

# What setup.sh --list calls test-only, and how to get it: test_setup checks that they agree.
SKIP_MESSAGE = ("skipped: needs promtool and prometheus_client: run scripts/setup.sh as root, or "
                "sudo apt-get install -y prometheus python3-prometheus-client")

# Interpreters that may have prometheus_client where the one running this test does not: Meson
# runs it with `python3` from PATH (a pyenv or venv one, say), while Debian's package installs
# the module for /usr/bin/python3.
CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")
REEXEC = "SP_TEST_METRICS_REEXEC"


def interpreter_with_client():
    """Another interpreter that can import prometheus_client, or None; and the ones tried."""
    me = os.path.realpath(sys.executable)
    tried = []
    for cand in CANDIDATES:
        if not os.access(cand, os.X_OK) or os.path.realpath(cand) == me or cand in tried:
            continue
        tried.append(cand)
        probe = subprocess.run([cand, "-c", "import prometheus_client.parser"],
                               capture_output=True)
        if probe.returncode == 0:
            return cand, tried
    return None, tried


def main():
    dump = sys.argv[1]
    promtool = shutil.which("promtool")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        text_string_to_metric_families = None
    if not text_string_to_metric_families and not os.environ.get(REEXEC):
        other, tried = interpreter_with_client()
        if other:
            print(f"# {sys.executable} lacks prometheus_client: running under {other}")
            sys.stdout.flush()
            os.environ[REEXEC] = "1"
            os.execv(other, [other, os.path.abspath(__file__), *sys.argv[1:]])
    if not promtool or not text_string_to_metric_families:
        lacking = []
        if not promtool:
            lacking.append("promtool (not on PATH)")
        if not text_string_to_metric_families:
            _, tried = interpreter_with_client()
            lacking.append("prometheus_client, which neither " +
                           ", ".join([sys.executable, *tried]) + " can import (install it for "
                           f"this one: {sys.executable} -m pip install prometheus-client)")
        print(SKIP_MESSAGE + "; missing: " + "; ".join(lacking))
        return 1 if os.environ.get("CI") == "true" else 77
    with tempfile.TemporaryDirectory() as tmp:
        mpath, spath = os.path.join(tmp, "metrics.txt"), os.path.join(tmp, "stats.txt")
        subprocess.run([dump, mpath, spath], check=True)
        text = open(mpath, encoding="utf-8").read()
        stats = {}
        for line in open(spath, encoding="utf-8").read().splitlines():
            name, blob = line.split("\t", 1)
            stats[name] = json.loads(blob)
    check = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                           capture_output=True)
    if check.returncode != 0:
        print("promtool check metrics failed:\n" + check.stdout.decode() + check.stderr.decode())
        return 1
    got = {}      # (sample name, pool) -> value
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        if not fam.documentation:
            print(f"no HELP text for {fam.name}")
            return 1
        for sm in fam.samples:
            assert sm.labels["device"] == "0", sm
            got[(sm.name, sm.labels.get("pool"))] = sm.value
    expect = {}
    for pool, st in stats.items():
        for f in ("requested", "active", "cached", "held"):
            expect[(f"streampool_{f}_bytes", pool)] = st[f]["current"]
            expect[(f"streampool_{f}_peak_bytes", pool)] = st[f]["peak"]
            expect[(f"streampool_{f}_added_bytes_total", pool)] = st[f]["total"]
        expect[("streampool_pool_reserved_bytes", pool)] = st["pool_reserved"]
        expect[("streampool_pool_used_bytes", pool)] = st["pool_used"]
        layout = {"inactive_split": "inactive_split_bytes", "largest_free": "largest_free_bytes",
                  "segments": "segments", "segment_bytes": "segment_bytes", "slabs": "slabs",
                  "slab_bytes": "slab_bytes",  # SP_STATS_LAYOUT: gauges
                  "streams": "streams",  # SP_STATS_STREAMS' gauge; released_streams is a _total
                  "reserve": "reserve_bytes", "reserve_idle": "reserve_idle_bytes",  # SP_STATS_RESERVE
                  # SP_STATS_MULTI's gauges; importer_reclaims is a _total
                  **{g: g for g in ("peers_read_write", "peers_read", "importers", "imported_blocks",
                                    "importer_held", "importer_held_bytes")}}
        for k, name in layout.items():
            expect[(f"streampool_{name}", pool)] = st[k]
        for k, v in st.items():
            if isinstance(v, int) and k not in ("version", "pool_reserved", "pool_used", "pools",
                                                *layout):
                expect[(f"streampool_{k}_total", pool)] = v
    expect[("streampool_pools", None)] = len(stats)
    # the limit in force, whole 2 MiB pages of llama's 65 MiB; no sample for pools without one
    expect[("streampool_limit_bytes", "llama")] = 64 * 1024 * 1024
    bad = 0
    for key in sorted(set(expect) | set(got), key=str):
        if got.get(key) != expect.get(key):
            print(f"{key}: metrics {got.get(key)} stats {expect.get(key)}")
            bad += 1
    # the workload left something in every figure the test relies on
    llama = stats["llama"]
    if llama["limit_rejections"] != 1 or llama["same_stream_hits"] != 4 or llama["allocs"] != 12:
        print("unexpected workload figures", llama)
        bad += 1
    if types.get("streampool_held_added_bytes") != "counter" or types.get("streampool_held_bytes") != "gauge":
        print("types", types)
        bad += 1
    print(f"{len(got)} samples over {len(stats)} pools checked, {bad} mismatches")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
