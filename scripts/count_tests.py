#!/usr/bin/env python3
"""Counts test cases across Meson test logs (testlog.json): every "ok"/"not ok" line of a test
that reports TAP, and each other test as one case. Prints 'N passed, N failed' and exits non-zero on any failure
or on a log that ran nothing."""
import json
import sys

passed = failed = 0
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            out_lines = (t.get("stdout") or "").splitlines()
            if any(l.startswith(("1..", "ok ", "not ok ")) for l in out_lines):
                seen = 0
                for out in out_lines:
                    if out.startswith("ok "):
                        passed += 1
                        seen += 1
                    elif out.startswith("not ok "):
                        failed += 1
                        seen += 1
                if t["result"] not in ("OK", "SKIP") or seen == 0:
                    failed += 1  # crashed, timed out, or reported nothing
            elif t["result"] == "OK":
                passed += 1
            elif t["result"] != "SKIP":
                failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed or passed == 0 else 0)
