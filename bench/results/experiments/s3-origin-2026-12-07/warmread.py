import sys, time, os
path, chunk = sys.argv[1], int(sys.argv[2]) << 20
buf = bytearray(chunk); mv = memoryview(buf)
fd = os.open(path, os.O_RDONLY)
t0 = time.monotonic(); n = 0
while True:
    k = os.readv(fd, [mv])
    if not k: break
    n += k
dt = time.monotonic() - t0
print("%s %d MiB reads: %.2f GiB in %.2f s = %.2f GiB/s" % (path, chunk >> 20, n / 2**30, dt, n / 2**30 / dt))
