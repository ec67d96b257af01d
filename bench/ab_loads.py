#!/usr/bin/env python3
"""Two builds of gguf-mount under llama.cpp loads of the large model, every figure paired.

  sudo python3 bench/ab_loads.py --before OLD/gguf-mount --after NEW/gguf-mount
                                 [--mode no-mmap|direct-io|mmap] [--rounds 3] [--data DATA]

The model is the `large` section's (bench/large.py: DATA/large/model.gguf and its 4 shards in
DATA/large/shards; run `bench/bench.py --sections large` once to generate it). Each round, for
cold (page cache dropped) and then warm (the file read once after the drop, through the mount for
the mount's rows): node-llama-cpp 3.22.1 `loadModel` alone (bench/first-token.mjs MODE
load-only) of the merged model on disk, then of the merged file through a mount of the shards by
both builds (each its own mount, unmounted after its load). Prints each load and
then, per state, the medians and file / mount for both builds. The two builds take turns at going
first (round 1: --before, round 2: --after, ...): a load right after another one can find the
memory in another state (this VM returns freed pages to its host). Only local files are read; no
address is contacted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = os.path.join(REPO, "tests", "clients")
FIRST_TOKEN = os.path.join(REPO, "bench", "first-token.mjs")


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_all(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def load(path, warm, mode):
    """Seconds of one loadModel of `path` (node's own clock), after a drop (+ a read when warm)."""
    drop_caches()
    if warm:
        read_all(path)
    p = subprocess.Popen(["node", FIRST_TOKEN, CLIENTS, mode, "load-only"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not json.loads(p.stdout.readline() or "{}").get("ready"):
            raise RuntimeError("first-token.mjs did not start: " + p.stderr.read()[-2000:])
        p.stdin.write(path + "\n")
        p.stdin.flush()
        line = p.stdout.readline()
        if not line:
            raise RuntimeError("the model did not load: " + p.stderr.read()[-2000:])
        return json.loads(line)["load_ms"] / 1000.0
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def mounted_load(binary, shards, merged_name, warm, mode):
    """load() of the merged file through a foreground mount of `shards` by `binary`."""
    mnt = tempfile.mkdtemp(prefix="gm-ab-loads-")
    d = subprocess.Popen([binary, shards, mnt, "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        merged = os.path.join(mnt, merged_name)
        t0 = time.monotonic()
        while not os.path.exists(merged):
            if d.poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError("%s did not mount %s" % (binary, shards))
            time.sleep(0.01)
        return load(merged, warm, mode)
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        try:
            d.wait(timeout=30)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()
        os.rmdir(mnt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--mode", default="no-mmap", choices=("no-mmap", "direct-io", "mmap"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", default=os.environ.get("GGUF_BENCH_DATA", os.path.join(REPO, "bench", "data")))
    a = ap.parse_args()
    model = os.path.join(a.data, "large", "model.gguf")
    shards = os.path.join(a.data, "large", "shards")
    if not os.path.exists(model) or not os.path.isdir(shards):
        raise SystemExit("%s: no large model (run bench/bench.py --sections large --data %s first)" % (model, a.data))
    merged_name = "llama.gguf"  # bench/large.py's shards: llama-0000i-of-00004.gguf
    res = {}
    for rnd in range(a.rounds):
        for state in ("cold", "warm"):
            warm = state == "warm"
            res.setdefault(("file", state), []).append(load(model, warm, a.mode))
            builds = [("before", a.before), ("after", a.after)]
            for name, binary in builds[rnd % 2:] + builds[:rnd % 2]:  # who goes first alternates
                res.setdefault((name, state), []).append(mounted_load(binary, shards, merged_name, warm, a.mode))
            print("round %d %s: %s" % (rnd + 1, state, ", ".join("%s %.2f s" % (k[0], v[-1]) for k, v in res.items()
                                                              if k[1] == state)), flush=True)
    for state in ("cold", "warm"):
        f = statistics.median(res[("file", state)])
        parts = ["%s, %s: file %.2f s" % (a.mode, state, f)]
        for name in ("before", "after"):
            m = statistics.median(res[(name, state)])
            parts.append("%s %.2f s (file / mount %.2fx)" % (name, m, f / m))
        print("; ".join(parts))
    print(json.dumps({"%s/%s" % k: v for k, v in res.items()}))


if __name__ == "__main__":
    sys.exit(main())
