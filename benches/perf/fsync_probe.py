"""Bare fdatasync latency: append 1 KiB, fdatasync, N times, in DIR.
Prints one JSON object: {"n":..,"p50_ms":..,"p99_ms":..,"syncs_per_s":..,
"ideal_p50_ms":..,"ideal_p99_ms":..}.

ideal_*: what an ideal serial group commit would show on these syncs at
RATE appends per second (default 10,000), arriving as `strobe perf -r` sends
them: evenly, released by its pacing thread at most every 200 us (two at a
time at 10,000/s). (The ledger bench's own copy of this model,
`ideal_group_commit` in crates/ledger/benches/append.rs, uses that bench's
1 ms ticks; this one runs without building the bench.) A sync starts whenever none is running and
appends wait, covers all of them, and lasts as long as the bare sync that
was running at the same moment of the probe's time line; no CPU, no
network. Appends that arrive during a slow sync wait out the rest of it and
then their own, so this p99 is above the bare p99 by the disk's doing: it
is the floor for any broker that acknowledges after its fsync."""
import bisect, json, os, sys, time

d, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000
rate = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
path = os.path.join(d, "fsync-probe.dat")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = b"x" * 1024
lat = []
t0 = time.perf_counter()
for _ in range(n):
    os.write(fd, buf)
    s = time.perf_counter()
    os.fdatasync(fd)
    lat.append(time.perf_counter() - s)
total = time.perf_counter() - t0
os.close(fd)
os.unlink(path)


def ideal(syncs, rate):
    ends, acc = [], 0.0
    for x in syncs:
        acc += x
        ends.append(acc)
    # PACE_QUANTUM in src/perf.rs: releases no closer than 200 us apart.
    gap = max(1.0 / rate, 200e-6)
    span, per_tick = acc, rate * gap
    ticks = int(span / gap)
    out, pending, t, owed, tick = [], [], 0.0, 0.0, 0
    while True:
        while tick < ticks and tick * gap <= t:
            owed += per_tick
            while owed >= 1.0:
                owed -= 1.0
                pending.append(tick * gap)
            tick += 1
        if not pending:
            if tick >= ticks:
                return out
            t = tick * gap
            continue
        i = min(bisect.bisect_right(ends, t % span), len(syncs) - 1)
        end = t + syncs[i]
        out.extend(end - a for a in pending)
        pending = []
        t = end


def q(v, p):
    return v[min(len(v) - 1, int(p * len(v)))] * 1000 if v else None


gc = sorted(ideal(lat, rate))
s = sorted(lat)
print(json.dumps({"n": n, "p50_ms": q(s, 0.5), "p99_ms": q(s, 0.99), "max_ms": s[-1] * 1000,
                  "syncs_per_s": n / total, "ideal_rate": rate,
                  "ideal_p50_ms": q(gc, 0.5), "ideal_p99_ms": q(gc, 0.99)}))
