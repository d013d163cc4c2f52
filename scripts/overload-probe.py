#!/usr/bin/env python3
"""A normal client for scripts/bench-overload.sh: one keep-alive connection
sending an increment every 10 ms (reconnecting when the server closes it),
printing how long each answer took, by status.

    overload-probe.py HOST:PORT SECONDS [SOURCE_IP]
prints: sent ok shed errors ok_p50_ms ok_p99_ms all_p99_ms all_max_ms

SOURCE_IP (e.g. 127.0.0.2, any 127/8 address works on Linux) makes the
probe a different client from a flood sent from 127.0.0.1: counterd's
HTTP admission queues clients by IP address.
"""
import http.client, sys, time

host, port = sys.argv[1].rsplit(":", 1)
secs = float(sys.argv[2])
source = (sys.argv[3], 0) if len(sys.argv) > 3 else None
ok, alls = [], []
shed = errors = 0
conn = None
end = time.monotonic() + secs
while time.monotonic() < end:
    t0 = time.monotonic()
    try:
        if conn is None:
            conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=source)
        conn.request("POST", "/counters/probe/increment", body='{"delta":1}',
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        dt = (time.monotonic() - t0) * 1000
        alls.append(dt)
        if r.status == 200:
            ok.append(dt)
        elif r.status == 503:
            shed += 1
        else:
            errors += 1
        if r.getheader("Connection", "").lower() == "close":
            conn.close(); conn = None
    except Exception:
        dt = (time.monotonic() - t0) * 1000
        alls.append(dt)
        errors += 1
        if conn is not None:
            conn.close()
        conn = None
    time.sleep(max(0, 0.01 - (time.monotonic() - t0)))

def q(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]

print(len(alls), len(ok), shed, errors,
      f"{q(ok, .5):.1f}", f"{q(ok, .99):.1f}", f"{q(alls, .99):.1f}", f"{max(alls) if alls else float('nan'):.1f}")
