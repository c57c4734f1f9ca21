#!/usr/bin/env python3
"""streampool-pair end to end, as TAP: a worker process owns two tenants' shareable pools; front
end processes write request inputs straight into them and the worker checks every byte.
  1. a front end runs to its end: every byte it wrote is the worker's, checked; nothing held;
  2. a front end that keeps its last imports is killed with SIGKILL after the worker freed them:
     the worker gets every one back (reclaims), nothing held, nothing live;
  3. the worker, sent SIGTERM, trims and destroys every pool: no byte held, exit 0;
  4. a worker killed with SIGKILL while a front end holds its blocks: the front end notices,
     closes and exits 0; a new worker then serves a new front end.
The figures go out as TAP comments.

usage: test_pair.py STREAMPOOL_PAIR"""
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading

TIMEOUT = 120


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=""):
        self.n += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}")
        if not cond:
            self.failed += 1
            for line in str(diag).splitlines():
                print(f"# {line}")
        sys.stdout.flush()
        return cond

    def finish(self):
        print(f"1..{self.n}")
        return 1 if self.failed else 0


class Proc:
    """A process whose stdout JSON lines are read by a thread into a queue."""

    def __init__(self, args):
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.err = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def event(self, name):
        """The next JSON line whose event is `name` (None at end of output or timeout)."""
        while True:
            try:
                line = self.lines.get(timeout=TIMEOUT)
            except queue.Empty:
                return None
            if line is None:
                return None
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == name:
                return e

    def wait(self):
        try:
            return self.p.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def main():
    pair = sys.argv[1]
    tap = Tap()
    tmp = tempfile.mkdtemp(prefix="sp-pair-")
    sock = os.path.join(tmp, "worker.sock")
    tenants = ["alpha:64M", "beta:16M"]

    worker = Proc([pair, "worker", sock] + tenants)
    up = worker.event("listening")
    if not tap.ok(up is not None and up["tenants"] == 2, "the worker listens with two tenants",
                  "".join(worker.err)):
        worker.p.kill()
        return tap.finish()

    # 1. a whole run
    fe = Proc([pair, "frontend", sock, "60", "3M"])
    done = fe.event("done")
    rc = fe.wait()
    gone = worker.event("frontend-gone")
    tap.ok(rc == 0 and done is not None and done["mismatched"] == 0 and done["requests"] == 60,
           "the front end wrote 60 requests' inputs and exits 0", f"{done} rc={rc} {fe.err}")
    tap.ok(gone is not None and done is not None and
           gone["served"] == done["requests"] - done["rejected"] and
           gone["bytes_checked"] == done["bytes_written"] and gone["mismatched"] == 0,
           "the worker checked every byte the front end wrote", f"{gone} {done}")
    tap.ok(gone is not None and gone["importer_held"] == 0 and gone["active"] == 0 and
           gone["held_at_eof"] == 0,
           "after it: nothing held for it, nothing live", gone)
    if gone and done:
        print(f"# figures: run: {done['requests']} requests, {gone['served']} blocks served, "
              f"{gone['bytes_checked']} bytes written by the front end and checked by the worker, "
              f"{gone['mismatched']} mismatched")

    # 2. a front end killed while it holds blocks the worker freed
    fe = Proc([pair, "frontend", sock, "30", "3M", "--hold", "3"])
    holding = fe.event("holding")
    tap.ok(holding is not None and holding["kept"] == 3 and holding["mismatched"] == 0,
           "a front end keeps its last 3 imports", f"{holding} {fe.err}")
    fe.p.send_signal(signal.SIGKILL)
    rc = fe.wait()
    gone = worker.event("frontend-gone")
    tap.ok(rc == -signal.SIGKILL, "it is killed with SIGKILL", rc)
    tap.ok(gone is not None and gone["held_at_eof"] == 3 and gone["freed_after_eof"] == 3 and
           gone["importer_reclaims"] == 3,
           "the worker held its 3 freed blocks until the kill, then got them back", gone)
    tap.ok(gone is not None and gone["importer_held"] == 0 and
           gone["importer_held_bytes"] == 0 and gone["active"] == 0 and gone["mismatched"] == 0,
           "nothing held, nothing live after the kill", gone)
    if gone:
        print(f"# figures: killed front end: {gone['held_at_eof']} blocks "
              f"({gone['held_bytes_at_eof']} bytes) held at its death, "
              f"{gone['freed_after_eof']} freed after it, importer_held now "
              f"{gone['importer_held']} ({gone['importer_held_bytes']} bytes), active "
              f"{gone['active']} bytes")

    # 3. the worker's end
    worker.p.send_signal(signal.SIGTERM)
    end = worker.event("exit")
    rc = worker.wait()
    tap.ok(rc == 0 and end is not None and end["active"] == 0 and end["held_after_trim"] == 0
           and end["destroyed"],
           "SIGTERM: every block back, every pool and the runtime destroyed, exit 0",
           f"{end} rc={rc} {worker.err}")
    if end:
        print(f"# figures: worker exit: active {end['active']} bytes, held after trim "
              f"{end['held_after_trim']} bytes")

    # 4. a worker killed while a front end holds its blocks
    worker = Proc([pair, "worker", sock] + tenants)
    up = worker.event("listening")
    fe = Proc([pair, "frontend", sock, "10", "1M", "--hold", "2"])
    holding = fe.event("holding")
    tap.ok(up is not None and holding is not None and holding["kept"] == 2,
           "a second worker; a front end holds 2 of its blocks", f"{holding} {fe.err}")
    worker.p.send_signal(signal.SIGKILL)
    wrc = worker.wait()
    rc = fe.wait()
    tap.ok(wrc == -signal.SIGKILL and rc == 0,
           "the worker killed with SIGKILL: the front end closes its imports and exits 0",
           f"worker {wrc} front end {rc} {fe.err}")
    worker = Proc([pair, "worker", sock] + tenants)
    up = worker.event("listening")
    fe = Proc([pair, "frontend", sock, "10", "1M"])
    done = fe.event("done")
    rc = fe.wait()
    gone = worker.event("frontend-gone")
    worker.p.send_signal(signal.SIGTERM)
    end = worker.event("exit")
    wrc = worker.wait()
    tap.ok(up is not None and rc == 0 and done is not None and done["mismatched"] == 0 and
           gone is not None and gone["bytes_checked"] == done["bytes_written"] and
           wrc == 0 and end is not None and end["held_after_trim"] == 0,
           "a new worker serves a new front end, and ends with every block back",
           f"{done} {gone} {end} {worker.err}")
    try:
        os.rmdir(tmp)
    except OSError:
        pass
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
