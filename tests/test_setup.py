#!/usr/bin/env python3
"""scripts/setup.sh as a newcomer runs it (issue 22, item 5): as root, without CI=true, it
installs the test-only packages too (promtool's prometheus, python3-prometheus-client), so the
metrics test runs; not as root it names them. The metrics test's skip message says the same.
setup.sh runs here with stand-ins for id, dpkg-query, apt-get and nvcc first on the PATH, so
nothing is installed. Usage: test_setup.py SETUP_SH TEST_METRICS_PY"""
import importlib.util
import os
import subprocess
import sys
import tempfile

TEST_ONLY = "prometheus python3-prometheus-client"


def run_setup(setup, uid, *args):
    with tempfile.TemporaryDirectory() as bin_dir:
        log = os.path.join(bin_dir, "apt.log")
        stubs = {
            "id": f"echo {uid}",
            "dpkg-query": "exit 1",  # nothing installed
            "apt-get": f'echo "$*" >> {log}',
            "nvcc": "exit 0",
        }
        for name, body in stubs.items():
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write("#!/bin/sh\n" + body + "\n")
            os.chmod(path, 0o755)
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env["PATH"] = bin_dir + os.pathsep + env["PATH"]
        proc = subprocess.run(["bash", setup, *args], env=env, capture_output=True, text=True)
        apt = open(log).read() if os.path.exists(log) else ""
        return proc.returncode, proc.stderr, apt


def main():
    setup, metrics = sys.argv[1], sys.argv[2]
    failures = []
    listing = subprocess.run(["bash", setup, "--list"], capture_output=True, text=True).stdout
    if f"test-only: {TEST_ONLY}" not in listing:
        failures.append(f"setup.sh --list: {listing!r}")
    rc, err, apt = run_setup(setup, 0)
    install = [line for line in apt.splitlines() if line.startswith("install")]
    if rc != 0 or not install or not all(p in install[0].split() for p in TEST_ONLY.split()):
        failures.append(f"as root without CI: exit {rc}, apt-get {apt!r}, stderr {err!r}")
    rc, err, apt = run_setup(setup, 1000)
    if rc == 0 or apt or f"{TEST_ONLY}" not in err:
        failures.append(f"not root: exit {rc}, apt-get {apt!r}, stderr {err!r}")
    # the benchmark's set-up (scripts/bench.sh): what building sp-bench needs, nothing of the
    # tests', no recommended packages (issue 27, item 10)
    rc, err, apt = run_setup(setup, 0, "--bench")
    install = [line.split() for line in apt.splitlines() if line.startswith("install")]
    bench = listing.split("bench: ", 1)[1].split() if "bench: " in listing else []
    got = [w for w in install[0] if not w.startswith("-")][1:] if install else []
    if (rc != 0 or not bench or sorted(got) != sorted(bench) or
            "--no-install-recommends" not in (install[0] if install else [])):
        failures.append(f"--bench: exit {rc}, apt-get {apt!r}, bench list {bench}")
    bench_sh = os.path.join(os.path.dirname(setup), "bench.sh")
    if "scripts/setup.sh --bench" not in open(bench_sh).read():
        failures.append("scripts/bench.sh does not run setup.sh --bench")
    spec = importlib.util.spec_from_file_location("test_metrics", metrics)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    msg = getattr(module, "SKIP_MESSAGE", "")
    if "scripts/setup.sh as root" not in msg or f"apt-get install -y {TEST_ONLY}" not in msg:
        failures.append(f"the metrics test's skip message does not say what setup.sh does: {msg!r}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
