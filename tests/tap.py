"""TAP for the Python suites run by Meson with protocol 'tap' (test_trace.py, test_sp_trace.py):
one "ok"/"not ok" line per check, the detail of a failed one as "# " comments, the plan last,
and the exit status: 1 if any check failed."""
import sys

n = failed = 0


def check(name, ok, detail="", lines=20):
    """One TAP line for `name`; a failure also prints the first `lines` lines of `detail`."""
    global n, failed
    n += 1
    print(("ok" if ok else "not ok") + f" {n} - {name}")
    if not ok:
        failed += 1
        for line in str(detail).splitlines()[:lines]:
            print("# " + line)


def done():
    """The plan, then the exit: 0 only if every check passed."""
    print(f"1..{n}")
    sys.exit(1 if failed else 0)
