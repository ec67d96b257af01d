import sys, os, json, time, threading, http.client
sys.path.insert(0, "/work/main/bench")
import remote_s3
port = json.load(open("/var/tmp/s3prof/s3.json"))["port"]
mode, width, rng = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) << 20  # mode: whole|range ; width ; range MiB
bufsz = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 20
names = ["llama-0000%d-of-00004.gguf" % i for i in (1, 2, 3, 4)]
sizes = [os.path.getsize("/var/tmp/bench-data/large-mid/shards/" + n) for n in names]
jobs = []
for n, s in zip(names, sizes):
    if mode == "whole": jobs.append((n, None))
    else:
        for o in range(0, s, rng): jobs.append((n, (o, min(s, o + rng) - 1)))
lock = threading.Lock(); total = [0]
def worker():
    c = http.client.HTTPConnection("127.0.0.1", port)
    buf = bytearray(bufsz)
    while True:
        with lock:
            if not jobs: return
            n, r = jobs.pop(0)
        path = "/bench/llama/" + n
        h = remote_s3.sigv4_headers("127.0.0.1:%d" % port, path)
        if r: h["Range"] = "bytes=%d-%d" % r
        c.request("GET", path, headers=h)
        resp = c.getresponse()
        got = 0
        while True:
            k = resp.readinto(buf)
            if not k: break
            got += k
        with lock: total[0] += got
t0 = time.monotonic()
ts = [threading.Thread(target=worker) for _ in range(width)]
[t.start() for t in ts]; [t.join() for t in ts]
print("bytes %d in %.2f s" % (total[0], time.monotonic() - t0))
