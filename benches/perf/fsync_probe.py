"""Bare fdatasync latency: append 1 KiB, fdatasync, N times, in DIR.
Prints one JSON object: {"n":..,"p50_ms":..,"p99_ms":..,"syncs_per_s":..}."""
import json, os, sys, time

d, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000
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
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
print(json.dumps({"n": n, "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": lat[-1] * 1000, "syncs_per_s": n / total}))
