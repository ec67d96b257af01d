"""Shared pieces of the real-client rows (issue 12) of bench/bench.py (local mounts) and
bench/remote.py (remote sources): a random llama model that llama.cpp runs, node-llama-cpp's time to
first token, and the bytes a process wrote to storage.

Only loopback addresses are ever contacted by the rows that use this (npm's registry only when the
node packages of tests/clients are missing, through tests/clients/run-clients.sh npm).
"""
import json
import os
import re
import shutil
import subprocess
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = os.path.join(REPO, "tests", "clients")
TINY = os.path.join(REPO, "tests", "fixtures", "tiny-llama", "tiny-llama.gguf")
FIRST_TOKEN = os.path.join(REPO, "bench", "first-token.mjs")


def clients_ready(gm):
    """node-llama-cpp usable: returns None, or why not (the row is then skipped with that note).
    Installs the npm packages of tests/clients when node >= 20 is there and they are missing."""
    node = shutil.which("node")
    if not node:
        return "node is not installed (node >= 20 and npm: see scripts/install-deps.sh)"
    major = subprocess.run([node, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    m = re.match(r"v(\d+)", major)
    if not m or int(m.group(1)) < 20:
        return "node %s is too old (node-llama-cpp 3.22.1 needs node >= 20)" % major
    if not os.path.isdir(os.path.join(CLIENTS, "node_modules", "@node-llama-cpp", "linux-x64")):
        r = subprocess.run([os.path.join(CLIENTS, "run-clients.sh"), gm, "/bin/true", "npm"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            return "npm install of tests/clients failed: " + r.stdout.strip().splitlines()[-1:][0]
    return None


def gen_llama(gen, gm, data, nbytes, shards, seed=7, sub="llama"):
    """Generates (once per spec) DATA/SUB/model.gguf (bench_gen llama, >= nbytes rounded down to
    whole 86 MiB layers, at least one) and its `shards`-shard set DATA/SUB/shards/llama-*.gguf.
    Returns (model path, first shard path, info dict of bench_gen)."""
    d = os.path.join(data, sub)
    spec = json.dumps({"bytes": nbytes, "shards": shards, "seed": seed, "v": 1}, sort_keys=True)
    marker = os.path.join(d, "SPEC.json")
    model = os.path.join(d, "model.gguf")
    sd = os.path.join(d, "shards")
    if not (os.path.exists(marker) and open(marker).read() == spec):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(sd)
        info = subprocess.run([gen, "llama", model, "--bytes", str(nbytes), "--tokenizer-from", TINY,
                               "--seed", str(seed)], check=True, stdout=subprocess.PIPE, text=True).stdout
        with open(os.path.join(d, "INFO.json"), "w") as f:
            f.write(info)
        per = -(-json.loads(info)["tensors"] // shards)
        subprocess.run([gm, "split", "-q", "--split-max-tensors", str(per), model, os.path.join(sd, "llama")],
                       check=True)
        with open(marker, "w") as f:
            f.write(spec)
    first = sorted(os.path.join(sd, f) for f in os.listdir(sd))[0]
    return model, first, json.loads(open(os.path.join(d, "INFO.json")).read())


def run_seconds(pid):
    """CPU time (s) the threads of process `pid` have run so far, and the time they waited runnable
    for a CPU (s), from /proc/PID/task/*/schedstat; (0, 0) when it cannot be read. On a shared
    machine the first separates a loader's own work from the time other processes took the CPUs."""
    run = wait = 0
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                a, b, _ = f.read().split()
            run += int(a)
            wait += int(b)
    except (OSError, ValueError):
        return 0.0, 0.0
    return run / 1e9, wait / 1e9


def first_token(prepare, cleanup=None, drop=None, mode=(), prefix=(), timeout=None):
    """One cold or warm measurement of node-llama-cpp's time to first token.

    `drop` (optional) runs first (drop caches, fill a warm cache), then node starts and loads its
    bindings (getLlama); only then the clock starts, `prepare()` runs (mount, download, merge...)
    and returns the model path, and node loads it and evaluates [BOS] up to the first token.
    `cleanup()` (optional) runs after node has exited (unmount). `mode`: extra arguments of
    first-token.mjs ("no-mmap", "direct-io", "load-only"; "mmap" to give the first alone). `prefix`: put
    before node's command (memgroup.MemGroup.prefix(): node runs in that cgroup). `timeout`: seconds
    from the model path's write on after which node is killed (RuntimeError "timed out"). Returns a dict:
    total_s (prepare + load + first token, by our clock), prepare_s, load_ms and eval_ms (node's), token,
    load_cpu_s and load_runq_s (node's CPU time and time waiting for a CPU from the model path's
    write to node's answer: run_seconds).
    Raises RuntimeError with node's stderr if the model does not load."""
    if drop:
        drop()
    p = subprocess.Popen(list(prefix) + ["node", FIRST_TOKEN, CLIENTS] + list(mode), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = None
    try:
        line = p.stdout.readline()
        if '"ready"' not in line:
            raise RuntimeError("first-token.mjs did not start: " + p.stderr.read()[-2000:])
        t0 = time.monotonic()
        path = prepare()
        t1 = time.monotonic()
        c1 = run_seconds(p.pid)
        p.stdin.write(path + "\n")
        p.stdin.flush()
        if timeout:
            timer = threading.Timer(timeout, p.kill)
            timer.start()
        out = p.stdout.readline()
        t2 = time.monotonic()
        c2 = run_seconds(p.pid)
        if not out.strip():
            if timeout and time.monotonic() - t1 >= timeout:
                raise RuntimeError("%s: timed out after %d s" % (path, timeout))
            raise RuntimeError("%s: node-llama-cpp did not load it (exit %s): %s" % (
                path, p.wait(), p.stderr.read()[-2000:]))
        r = json.loads(out)
        p.stdin.close()
        p.wait(timeout=60)
    finally:
        if timer:
            timer.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()
        if cleanup:
            cleanup()
    return {"total_s": t2 - t0, "prepare_s": t1 - t0, "load_ms": r["load_ms"], "eval_ms": r["eval_ms"],
            "token": r["token"], "load_cpu_s": c2[0] - c1[0], "load_runq_s": c2[1] - c1[1]}


def run_counting_writes(cmd, **kw):
    """Runs `cmd` to completion and returns (seconds, write_bytes): the bytes the process (and its
    threads) caused to be written to storage, from /proc/PID/io read while it is a zombie (waitid
    WNOWAIT), i.e. counted when pages are dirtied, whatever the write path (write, copy_file_range,
    mmap). Raises CalledProcessError on a non-zero exit."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, **kw)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    dt = time.monotonic() - t0
    written = None
    with open("/proc/%d/io" % p.pid) as f:
        for line in f:
            if line.startswith("write_bytes:"):
                written = int(line.split()[1])
    rc = p.wait()
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)
    return dt, written


def device_written(path):
    """Bytes written so far to the block device holding `path` (/sys/dev/block/MAJ:MIN/stat,
    sectors of 512 bytes; counts every process on that device), or None when not found."""
    st = os.stat(path).st_dev
    p = "/sys/dev/block/%d:%d/stat" % (os.major(st), os.minor(st))
    try:
        return int(open(p).read().split()[6]) * 512
    except (OSError, IndexError, ValueError):
        return None
