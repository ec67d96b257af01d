#!/usr/bin/env python3
"""S3 row of the remote benchmark: a cold sequential read of a merged model through
`gguf-mount s3://BUCKET/KEY-00001-of-N.gguf` against `curl --aws-sigv4` of the same objects, both
from the same server in the same run: s3rver behind the test proxy that verifies every request's
Signature V4 (tests/remote/s3; its npm packages come from scripts/install-deps.sh).

  bench/remote_s3.py [--bytes N] [--runs N] [--build DIR] [--gen BENCH_GEN] [--ref-gm OLD_GM]

The 1,200-key prefix row (mount-to-readable of s3://bench/s1200/) comes with its baselines from
the same run: the same 1,200 first-block GETs signed by a thread pool of keep-alive connections
(8 and 32 wide) through the verifying proxy and straight to s3rver, the two ListObjectsV2 pages
alone, the same mount straight against s3rver (the proxy's share), --ref-gm's mount (before/after),
and the HTTP equivalent: the 1,200-shard set's first shard from a loopback nginx.

Each 1,200-key mount gets a cache directory never used before (all removed at the end): ext4
creates inodes slowly for about 30 s after thousands were deleted (its allocator skips recently
deleted ones), so removing the previous run's cache just before would time that removal. That
case is a row of its own: the mount right after its filled cache was removed (what a remount
after `gguf-mount cache clear` meets), for this build and --ref-gm's.

Only 127.0.0.1 is ever contacted. Data is generated with bench_gen + gguf-mount split under
bench/data/s3 (never committed). Run as root (drops caches). Prints one markdown table and writes
bench/results/remote-s3.{md,json}.
"""
import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

import remote as R

REPO = R.REPO
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
KEY_ID = SECRET = "S3RVER"  # s3rver's own key; the proxy checks the signature with this secret


def sigv4_headers(host, path, query=""):
    """SigV4 headers of a GET without body by KEY_ID/SECRET for us-east-1 (path and query
    already canonical): the AWS signing steps, for the baseline client only."""
    amz = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    h = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz}
    names = ";".join(sorted(h))
    canonical = "\n".join(["GET", path, query, "".join("%s:%s\n" % (k, h[k]) for k in sorted(h)), names,
                           EMPTY_SHA256])
    scope = amz[:8] + "/us-east-1/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + SECRET).encode()
    for part in (amz[:8], "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    h["Authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s,SignedHeaders=%s,Signature=%s" % (
        KEY_ID, scope, names, hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest())
    return h


def first_block_gets(port, keys, width):
    """Seconds for a signed ranged GET of the first block (4 MiB) of every key of bucket "bench",
    `width` keep-alive connections at once (one thread each, the next key when done)."""
    it = iter(keys)
    lock = threading.Lock()
    errors = []

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                k = next(it, None)
            if k is None:
                return
            path = "/bench/" + urllib.parse.quote(k)
            h = sigv4_headers("127.0.0.1:%d" % port, path)
            h["Range"] = "bytes=0-%d" % (R.BLOCK - 1)
            c.request("GET", path, headers=h)
            r = c.getresponse()
            r.read()
            if r.status not in (200, 206):
                errors.append("%s: %d" % (k, r.status))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(width)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("baseline GETs failed: " + "; ".join(errors[:3]))
    return time.monotonic() - t0


def list_pages(port, prefix):
    """Seconds to walk the ListObjectsV2 pages of `prefix` in bucket "bench" (one connection)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    token = None
    t0 = time.monotonic()
    while True:
        q = [("delimiter", "/"), ("list-type", "2"), ("prefix", prefix)] + ([("continuation-token", token)] if token else [])
        query = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
                         for k, v in sorted(q))
        c.request("GET", "/bench?" + query, headers=sigv4_headers("127.0.0.1:%d" % port, "/bench", query))
        body = c.getresponse().read().decode()
        if "<IsTruncated>true" not in body:
            return time.monotonic() - t0
        token = body.split("<NextContinuationToken>")[1].split("</NextContinuationToken>")[0]


def start_nginx(root, run_dir):
    """A loopback nginx serving `root`; returns (process, port)."""
    port = R.free_port()
    nd = os.path.join(run_dir, "nginx-s3")
    shutil.rmtree(nd, ignore_errors=True)
    os.makedirs(nd)
    with open(os.path.join(nd, "nginx.conf"), "w") as f:
        f.write("daemon off; worker_processes 1; pid %s/nginx.pid; error_log %s/error.log;\n"
                "events { worker_connections 1024; }\nhttp { access_log off; sendfile on; keepalive_requests 100000;\n"
                "  client_body_temp_path %s; proxy_temp_path %s; fastcgi_temp_path %s; uwsgi_temp_path %s;\n"
                "  scgi_temp_path %s; server { listen 127.0.0.1:%d; root %s; } }\n" % ((nd,) * 7 + (port, root)))
    p = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", nd + "/nginx.conf", "-p", nd + "/",
                          "-e", nd + "/error.log"])
    with open(os.path.join(run_dir, "pids"), "a") as f:
        f.write("%d\n" % p.pid)
    for _ in range(100):
        try:
            R.socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nginx did not start (see %s/error.log)" % nd)


def connections(access_log, since, prefix):
    """Requests and distinct client connections in the proxy's log lines from `since` on whose
    URI starts with `prefix`."""
    lines = [json.loads(l) for l in open(access_log).read().splitlines()[since:] if l.strip()]
    mine = [l for l in lines if l["uri"].startswith(prefix)]
    return len(mine), len({l.get("client_port") for l in mine})


def log_lines(access_log):
    return sum(1 for l in open(access_log) if l.strip())


def gen_shards(a, gm, seed_dir):
    """The dense model split into 8 shards as seed/bench/dense/model-*.gguf, and a 1,200-shard
    set of 4 KiB tensors as seed/bench/s1200/ (reused when there)."""
    dense = os.path.join(seed_dir, "bench", "dense")
    marker = os.path.join(a.data, "S3_SPEC.json")
    spec = json.dumps({"bytes": a.bytes, "shards": 8, "v": 2})
    if os.path.exists(marker) and open(marker).read() == spec:
        return sorted(os.listdir(dense))
    shutil.rmtree(seed_dir, ignore_errors=True)
    os.makedirs(dense)
    os.makedirs(os.path.join(seed_dir, "bench", "s1200"))
    tmp = os.path.join(a.data, "m.gguf")
    info = json.loads(R.run([a.gen, "dense", tmp, "--bytes", str(a.bytes), "--vocab", "32000", "--seed", "1"]).stdout)
    R.run([gm, "split", "-q", "--split-max-tensors", str(-(-info["tensors"] // 8)), tmp, os.path.join(dense, "model")])
    os.unlink(tmp)
    R.run([a.gen, "sparse", tmp, "--tensors", "1200", "--tensor-bytes", "4096", "--vocab", "32000", "--seed", "2"])
    R.run([gm, "split", "-q", "--split-max-tensors", "1", tmp, os.path.join(seed_dir, "bench", "s1200", "model")])
    os.unlink(tmp)
    with open(marker, "w") as f:
        f.write(spec)
    return sorted(os.listdir(dense))


def _run_s3(d, run_dir, config, timeout):
    """Writes `config` to d/config.json and starts the S3 test server on it; waits for its ready
    file. Returns (process, ready)."""
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    server = os.path.join(REPO, "tests", "remote", "s3", "s3_server.js")
    p = subprocess.Popen(["node", "--openssl-legacy-provider", server, os.path.join(d, "config.json")],
                         stdout=open(os.path.join(d, "output.log"), "a"), stderr=subprocess.STDOUT)
    with open(os.path.join(run_dir, "pids"), "a") as f:
        f.write("%d\n" % p.pid)
    t0 = time.monotonic()
    while not os.path.exists(config["ready"]):
        if p.poll() is not None or time.monotonic() - t0 > timeout:
            raise RuntimeError("the S3 test server did not start: " + open(os.path.join(d, "output.log")).read()[-4000:])
        time.sleep(0.05)
    return p, json.load(open(config["ready"]))


def start_s3(a, seed_dir, run_dir):
    """s3rver + the verifying proxy, seeded with seed_dir; returns (process, ready, access log)."""
    d = os.path.join(run_dir, "s3")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "data"))
    config = {"directory": os.path.join(d, "data"), "buckets": ["bench"], "seed": seed_dir,
              "credentials": {KEY_ID: {"secret": SECRET}}, "access_log": os.path.join(d, "access.log"),
              "ready": os.path.join(d, "ready")}
    p, ready = _run_s3(d, run_dir, config, 600)
    return p, ready, config["access_log"]


def restart_s3(p, run_dir, proxy_port):
    """Stops the S3 test server `p` (start_s3's) and starts it again on the same data, unseeded,
    its proxy on the same `proxy_port` (a mount's block cache is keyed by the endpoint), so that
    no measurement inherits the state of the node process the one before used (the same 3.16 GB
    cost it 3.2 to 9.2 CPU-seconds from pass to pass; bench/README.md, 2026-12-07). Returns
    (process, ready)."""
    d = os.path.join(run_dir, "s3")
    p.terminate()
    p.wait()
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    config.pop("seed", None)
    config["proxy_port"] = proxy_port
    os.unlink(config["ready"])
    return _run_s3(d, run_dir, config, 60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=512 << 20, help="model size (default 512 MiB)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(REPO, "bench", "data", "s3"))
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--gm", default=None)
    ap.add_argument("--ref-gm", default=None, help="an older gguf-mount whose 1,200-key mount is measured too")
    ap.add_argument("--gen", default=None, help="bench_gen (default BUILD/bench/bench_gen)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    a.gm = a.gm or os.path.join(a.build, "gguf-mount")
    a.gen = a.gen or os.path.join(a.build, "bench", "bench_gen")
    ref_gm = a.ref_gm
    a.ref_gm = None
    a.quick = False
    os.makedirs(os.path.join(a.data, "tmp"), exist_ok=True)
    b = R.Bench(a)
    seed = os.path.join(a.data, "seed")
    names = gen_shards(a, a.gm, seed)
    total = sum(os.path.getsize(os.path.join(seed, "bench", "dense", n)) for n in names)
    keys1200 = sorted("s1200/" + n for n in os.listdir(os.path.join(seed, "bench", "s1200")))
    server, ready, access_log = start_s3(a, seed, b.run_dir)
    endpoint = "http://127.0.0.1:%d" % ready["proxy_port"]
    direct = "http://127.0.0.1:%d" % ready["s3_port"]
    nginx, nginx_port = start_nginx(os.path.join(seed, "bench"), b.run_dir)
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL_S3": endpoint,
           "AWS_REGION": "us-east-1", "AWS_SHARED_CREDENTIALS_FILE": os.path.join(a.data, "none"),
           "AWS_CONFIG_FILE": os.path.join(a.data, "none")}
    os.environ.update(env)
    urls = ["%s/bench/dense/%s" % (endpoint, n) for n in names]
    runs = {k: [] for k in ("gm_s", "curl_s", "open1200_s", "open1200_ref_s", "open1200_cleared_s",
                            "open1200_ref_cleared_s", "open1200_direct_s", "get8_s", "get32_s", "get8_direct_s",
                            "list_s", "open1200_http_s")}
    conns = {}
    merged = 0
    caches = os.path.join(a.data, "tmp", "caches1200")
    shutil.rmtree(caches, ignore_errors=True)
    os.makedirs(caches)
    made = []

    def new_cache():
        """A cache directory never used before (see the file note); removed at the end."""
        made.append(os.path.join(caches, str(len(made))))
        return made[-1]

    def mount1200(key, gm=None, source="s3://bench/s1200/", cache=None):
        R.drop_caches()
        since = log_lines(access_log)
        p, _, t_open = b.mount(source, cache or new_cache(), gm)
        b.umount(p)
        runs.setdefault(key, []).append(t_open)
        conns[key] = connections(access_log, since, "/bench/s1200/")

    def mount1200_cleared(key, gm=None):
        """The mount right after its own filled cache was removed (rm -r, as `cache clear`)."""
        cache = new_cache()
        mount1200(key + "_fill", gm, cache=cache)
        R.drop_caches()
        shutil.rmtree(cache)
        mount1200(key, gm, cache=cache)

    try:
        for i in range(a.runs):
            R.log("s3 cold run %d/%d" % (i + 1, a.runs))
            R.drop_caches()
            t0 = time.monotonic()
            R.run(["curl", "-sSf", "--noproxy", "*", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                   KEY_ID + ":" + SECRET, "-H", "x-amz-content-sha256: " + EMPTY_SHA256] +
                  sum((["-o", "/dev/null", u] for u in urls), []))
            runs["curl_s"].append(time.monotonic() - t0)
            n, t_read, _ = b.remote_cold("s3://bench/dense/" + names[0])
            if n < total * 0.99:  # the merged file: the shards less the headers of shards 2..N
                raise RuntimeError("read %d bytes through the mount, about %d expected" % (n, total))
            merged = n
            runs["gm_s"].append(t_read)
            # A 1,200-key prefix (ListObjectsV2 pages of 1,000): mount to the merged file readable,
            # and its baselines against the same server.
            mount1200("open1200_s")
            if ref_gm:
                mount1200("open1200_ref_s", ref_gm)
            mount1200_cleared("open1200_cleared_s")
            if ref_gm:
                mount1200_cleared("open1200_ref_cleared_s", ref_gm)
            os.environ["AWS_ENDPOINT_URL_S3"] = direct
            try:
                mount1200("open1200_direct_s")
            finally:
                os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
            for key, port, width in (("get8_s", ready["proxy_port"], 8), ("get32_s", ready["proxy_port"], 32),
                                     ("get8_direct_s", ready["s3_port"], 8)):
                R.drop_caches()
                runs[key].append(first_block_gets(port, keys1200, width))
            runs["list_s"].append(list_pages(ready["proxy_port"], "s1200/"))
            R.drop_caches()
            p, _, t_open = b.mount("http://127.0.0.1:%d/s1200/%s" % (nginx_port, keys1200[0][6:]), new_cache())
            b.umount(p)
            runs["open1200_http_s"].append(t_open)
    finally:
        server.terminate()
        server.wait()
        nginx.terminate()
        nginx.wait()
        shutil.rmtree(caches, ignore_errors=True)
    verdicts = [json.loads(l).get("verdict") for l in open(access_log) if l.strip()]
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    r = {"bytes": total, "merged_bytes": merged, "shards": len(names), "runs": runs, "median": med,
         "gm_MBps": merged / med["gm_s"] / 1e6, "connections_last_run": conns,
         "curl_MBps": total / med["curl_s"] / 1e6, "requests": len(verdicts),
         "verified": sum(v == "verified" for v in verdicts), "load_end": os.getloadavg()}
    r["ratio"] = r["gm_MBps"] / r["curl_MBps"]
    o = med["open1200_s"]

    def vs(key, what):
        return "| %s | %.2f s | %.2fx |" % (what, med[key], med[key] / o)

    n1200, c1200 = conns["open1200_s"]
    lines = ["| row | gguf-mount | reference | ratio |", "|---|---|---|---|",
             "| cold read, s3:// first shard, %.2f GiB in %d shards | %.0f MB/s | curl --aws-sigv4 %.0f MB/s | %.2fx |" % (
                 total / 2**30, len(names), r["gm_MBps"], r["curl_MBps"], r["ratio"]),
             "| 1,200-key prefix (ListObjectsV2 pages of 1,000): mount-to-readable | %.2f s | target < 2 s | |" % o,
             "", "Baselines of the 1,200-key row, same server, same run (ratio: baseline / gguf-mount's %.2f s; "
             "gguf-mount sent %d requests on %d connections through the proxy in the last run):" % (o, n1200, c1200),
             "", "| baseline | seconds | ratio |", "|---|---|---|"]
    if "open1200_ref_s" in med:
        lines.append(vs("open1200_ref_s", "the same mount by the previous gguf-mount (before)"))
    lines.append(vs("open1200_cleared_s", "the same mount right after its filled cache was removed"))
    if "open1200_ref_cleared_s" in med:
        lines.append(vs("open1200_ref_cleared_s", "the same, by the previous gguf-mount (before)"))
    lines += [vs("open1200_direct_s", "the same mount straight to s3rver (no verifying proxy)"),
              vs("list_s", "the 2 ListObjectsV2 pages alone (one connection)"),
              vs("get8_s", "1,200 signed first-block GETs, 8 keep-alive connections"),
              vs("get32_s", "1,200 signed first-block GETs, 32 keep-alive connections"),
              vs("get8_direct_s", "1,200 signed first-block GETs, 8 connections, straight to s3rver"),
              vs("open1200_http_s", "the 1,200-shard set's first shard from nginx (http://)"),
              "", "Median of %d runs; page cache dropped and block cache emptied before each. Both clients read "
              "through the same SigV4-verifying proxy in front of s3rver (%d of %d requests verified). "
              "Load average at the end: %s." % (a.runs, r["verified"], r["requests"],
                                               " ".join("%.2f" % x for x in r["load_end"]))]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "remote-s3.json"), "w") as f:
        json.dump(r, f, indent=1)
    with open(os.path.join(a.out, "remote-s3.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
