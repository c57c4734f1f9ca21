#!/usr/bin/env python3
"""Load generator for streampool-server (Python standard library only).

Sends a fixed load, the same for the same seed: REQUESTS inference requests, each to a tenant
picked at random from TENANTS with 1 to MAX_BUFFERS buffers of 1 to MAX_BYTES bytes, from
CONCURRENCY threads, each on its own keep-alive connection. Prints one JSON object: per tenant
the requests, buffers and bytes sent and those answered 200 (with the largest total of one
served request's buffers), and the count of every HTTP status. Exits 0 if every request was
answered 200, 1 otherwise.

  load.py --port 8080 --tenants llama,mistral --requests 200 --seed 1
"""
import argparse
import http.client
import json
import random
import sys
import threading


def make_load(args):
    """The list of (tenant, sizes) to send: a pure function of the arguments."""
    rng = random.Random(args.seed)
    tenants = args.tenants.split(",")
    load = []
    for _ in range(args.requests):
        tenant = rng.choice(tenants)
        sizes = [rng.randint(1, args.max_bytes) for _ in range(rng.randint(1, args.max_buffers))]
        load.append((tenant, sizes))
    return load


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--tenants", required=True, help="comma-separated tenant names")
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-buffers", type=int, default=4)
    p.add_argument("--max-bytes", type=int, default=1 << 20)
    p.add_argument("--delay-us", type=int, default=100, help="the host-function delay per request")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    args = p.parse_args()
    if args.requests < 0 or args.concurrency < 1 or args.max_buffers < 1 or args.max_bytes < 1:
        p.error("--requests must be >= 0; --concurrency, --max-buffers, --max-bytes >= 1")

    load = make_load(args)
    lock = threading.Lock()
    cursor = [0]
    sent = {t: {"requests": 0, "buffers": 0, "bytes": 0,
                "served_requests": 0, "served_buffers": 0, "served_bytes": 0,
                "served_max_request_bytes": 0}
            for t in args.tenants.split(",")}
    statuses = {}
    errors = []

    def next_request():
        with lock:
            if cursor[0] == len(load):
                return None
            cursor[0] += 1
            return load[cursor[0] - 1]

    def run():
        conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout)
        try:
            while (item := next_request()) is not None:
                tenant, sizes = item
                path = (f"/infer?tenant={tenant}&sizes={','.join(map(str, sizes))}"
                        f"&delay_us={args.delay_us}")
                conn.request("POST", path)
                resp = conn.getresponse()
                body = resp.read()
                with lock:
                    s = sent[tenant]
                    s["requests"] += 1
                    s["buffers"] += len(sizes)
                    s["bytes"] += sum(sizes)
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if resp.status == 200:
                        s["served_requests"] += 1
                        s["served_buffers"] += len(sizes)
                        s["served_bytes"] += sum(sizes)
                        s["served_max_request_bytes"] = max(s["served_max_request_bytes"],
                                                            sum(sizes))
                    elif len(errors) < 10:
                        errors.append(f"{resp.status} {path}: {body.decode(errors='replace')}")
        except (OSError, http.client.HTTPException) as e:
            with lock:
                errors.append(f"connection: {e!r}")
        finally:
            conn.close()

    threads = [threading.Thread(target=run) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = {
        "seed": args.seed,
        "sent": sum(s["requests"] for s in sent.values()),
        "planned": len(load),
        "status": {str(k): v for k, v in sorted(statuses.items())},
        "tenants": sent,
        "errors": errors,
    }
    print(json.dumps(report, indent=1, sort_keys=True))
    ok = report["sent"] == len(load) and statuses.get(200, 0) == len(load)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
