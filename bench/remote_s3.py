#!/usr/bin/env python3
"""S3 row of the remote benchmark: a cold sequential read of a merged model through
`gguf-mount s3://BUCKET/KEY-00001-of-N.gguf` against `curl --aws-sigv4` of the same objects, both
from the same server in the same run: s3rver behind the test proxy that verifies every request's
Signature V4 (tests/remote/s3; its npm packages come from scripts/install-deps.sh).

  bench/remote_s3.py [--bytes N] [--runs N] [--build DIR] [--gen BENCH_GEN]

Only 127.0.0.1 is ever contacted. Data is generated with bench_gen + gguf-mount split under
bench/data/s3 (never committed). Run as root (drops caches). Prints one markdown table and writes
bench/results/remote-s3.{md,json}.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import remote as R

REPO = R.REPO
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
KEY_ID = SECRET = "S3RVER"  # s3rver's own key; the proxy checks the signature with this secret


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


def start_s3(a, seed_dir, run_dir):
    """s3rver + the verifying proxy, seeded with seed_dir; returns (process, endpoint URL)."""
    d = os.path.join(run_dir, "s3")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "data"))
    config = {"directory": os.path.join(d, "data"), "buckets": ["bench"], "seed": seed_dir,
              "credentials": {KEY_ID: {"secret": SECRET}}, "access_log": os.path.join(d, "access.log"),
              "ready": os.path.join(d, "ready")}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    server = os.path.join(REPO, "tests", "remote", "s3", "s3_server.js")
    p = subprocess.Popen(["node", "--openssl-legacy-provider", server, os.path.join(d, "config.json")],
                         stdout=open(os.path.join(d, "output.log"), "w"), stderr=subprocess.STDOUT)
    with open(os.path.join(run_dir, "pids"), "a") as f:
        f.write("%d\n" % p.pid)
    t0 = time.monotonic()
    while not os.path.exists(config["ready"]):
        if p.poll() is not None or time.monotonic() - t0 > 600:
            raise RuntimeError("the S3 test server did not start: " + open(os.path.join(d, "output.log")).read())
        time.sleep(0.1)
    return p, "http://127.0.0.1:%d" % json.load(open(config["ready"]))["proxy_port"], config["access_log"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=512 << 20, help="model size (default 512 MiB)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(REPO, "bench", "data", "s3"))
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--gm", default=None)
    ap.add_argument("--gen", default=None, help="bench_gen (default BUILD/bench/bench_gen)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    a.gm = a.gm or os.path.join(a.build, "gguf-mount")
    a.gen = a.gen or os.path.join(a.build, "bench", "bench_gen")
    a.ref_gm = None
    a.quick = False
    os.makedirs(os.path.join(a.data, "tmp"), exist_ok=True)
    b = R.Bench(a)
    seed = os.path.join(a.data, "seed")
    names = gen_shards(a, a.gm, seed)
    total = sum(os.path.getsize(os.path.join(seed, "bench", "dense", n)) for n in names)
    server, endpoint, access_log = start_s3(a, seed, b.run_dir)
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL_S3": endpoint,
           "AWS_REGION": "us-east-1", "AWS_SHARED_CREDENTIALS_FILE": os.path.join(a.data, "none"),
           "AWS_CONFIG_FILE": os.path.join(a.data, "none")}
    os.environ.update(env)
    urls = ["%s/bench/dense/%s" % (endpoint, n) for n in names]
    runs = {"gm_s": [], "curl_s": [], "open1200_s": []}
    merged = 0
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
            # A 1,200-key prefix (ListObjectsV2 pages of 1,000): mount to the merged file readable.
            R.drop_caches()
            p, _, t_open = b.mount("s3://bench/s1200/", b.fresh_cache())
            b.umount(p)
            runs["open1200_s"].append(t_open)
    finally:
        server.terminate()
        server.wait()
    verdicts = [json.loads(l).get("verdict") for l in open(access_log) if l.strip()]
    med = {k: statistics.median(v) for k, v in runs.items()}
    r = {"bytes": total, "merged_bytes": merged, "shards": len(names), "runs": runs, "median": med,
         "gm_MBps": merged / med["gm_s"] / 1e6,
         "curl_MBps": total / med["curl_s"] / 1e6, "requests": len(verdicts),
         "verified": sum(v == "verified" for v in verdicts), "load_end": os.getloadavg()}
    r["ratio"] = r["gm_MBps"] / r["curl_MBps"]
    lines = ["| row | gguf-mount | reference | ratio |", "|---|---|---|---|",
             "| cold read, s3:// first shard, %.2f GiB in %d shards | %.0f MB/s | curl --aws-sigv4 %.0f MB/s | %.2fx |" % (
                 total / 2**30, len(names), r["gm_MBps"], r["curl_MBps"], r["ratio"]),
             "| 1,200-key prefix (ListObjectsV2 pages of 1,000): mount-to-readable | %.2f s | target < 2 s | |" % (
                 med["open1200_s"]),
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
