"""CPU time per durable write on this machine, for the ways a journal can make
a small write durable: buffered pwrite + fdatasync (1 KiB and 4 KiB),
O_DSYNC, O_DIRECT|O_DSYNC, O_DIRECT + fdatasync. Each into a preallocated
64 MiB file in DIR (overwrites: no size change to commit), N writes, one at
a time. Prints, per mode, the system and user CPU per write (getrusage), the
latency p50/p99 and voluntary context switches per write.

    python3 benches/perf/sync_cost.py [DIR] [N]

On a VM every device request is a trap to the host; this is the floor of
broker CPU per fsync that no user-space change removes (docs/performance.md,
"The unbatched path")."""
import mmap, os, resource, sys, time

d = sys.argv[1] if len(sys.argv) > 1 else "."
n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
path = os.path.join(d, "sync-cost.dat")


def prealloc():
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"\0" * (64 << 20))
    os.fsync(fd)
    os.close(fd)


def run(name, flags, size, sync):
    prealloc()
    fd = os.open(path, os.O_WRONLY | flags)
    buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * size)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    lat, off = [], 0
    for _ in range(n):
        s = time.perf_counter()
        os.pwritev(fd, [buf], off)
        off += size
        if sync:
            os.fdatasync(fd)
        lat.append(time.perf_counter() - s)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    os.close(fd)
    lat.sort()
    print(f"{name:30s} sys {1e6 * (r1.ru_stime - r0.ru_stime) / n:6.1f} us  "
          f"user {1e6 * (r1.ru_utime - r0.ru_utime) / n:5.1f} us  "
          f"p50 {lat[n // 2] * 1e3:.3f} p99 {lat[int(n * .99)] * 1e3:.3f} ms  "
          f"switches {(r1.ru_nvcsw - r0.ru_nvcsw) / n:.2f}", flush=True)


try:
    run("pwrite 1 KiB + fdatasync", 0, 1024, True)
    run("pwrite 4 KiB + fdatasync", 0, 4096, True)
    run("O_DSYNC 4 KiB", os.O_DSYNC, 4096, False)
    run("O_DIRECT|O_DSYNC 4 KiB", os.O_DIRECT | os.O_DSYNC, 4096, False)
    run("O_DIRECT 4 KiB + fdatasync", os.O_DIRECT, 4096, True)
finally:
    if os.path.exists(path):
        os.unlink(path)
