"""Load modes of a large model (bench.py --sections large), issue 25 item 13: which llama.cpp
load mode to pick through the mount.

The model: a llama model llama.cpp runs (real_client.gen_llama: bench_gen llama, random F16),
>= 8 GiB (--quick: 1 layer), in DATA/large/model.gguf, split into 4 shards by `gguf-mount split`
under DATA/large/shards/. Targets, in the same run: "file", model.gguf on the local file system,
and "mount", the merged llama.gguf through a gguf-mount mount of the shards.

Rows, cold (caches dropped) and warm (caches dropped, then that target filled by one
sequential read() pass), targets alternating run by run:
- read(): sequential 1 MiB preads of the whole file (llama.cpp --no-mmap reads the file);
- mmap + touch: MAP_SHARED, one byte read per 4 KiB page in order;
- mmap MAP_POPULATE + touch (llama.cpp's mmap load: llama_mmap maps with MAP_POPULATE);
- node-llama-cpp 3.22.1 loadModel with useMmap true and false (llama.cpp --mmap / --no-mmap) and
  with useDirectIo (llama.cpp --direct-io: O_DIRECT reads into a bounce buffer, mmap off),
  loadModel alone (first-token.mjs load-only), when node >= 20 and the packages are there; with
  the loader's CPU time beside the wall time (on a shared machine the wall time also holds the time
  other processes had the CPUs).
"""

import os
import statistics

import real_client as rc

GIB = float(1 << 30)
MODES = {"seq": ["seq", "--bs", "1048576"], "touch": ["touch"], "populate": ["touch", "--populate"]}
LABEL = {"seq": "read(), 1 MiB", "touch": "mmap + touch", "populate": "mmap MAP_POPULATE + touch",
         "load-mmap": "loadModel, mmap on", "load-no-mmap": "loadModel, mmap off",
         "load-direct-io": "loadModel, direct I/O"}
LOADS = {"load-mmap": "mmap", "load-no-mmap": "no-mmap", "load-direct-io": "direct-io"}


def run_large(b, log):
    """Measures the rows above with bench.Bench `b`; stores them in b.results["large"]."""
    nbytes = (64 << 20) if b.a.quick else (17 << 29)  # quick: 1 layer; full: 8.5 GiB -> 99 layers
    model, first, info = rc.gen_llama(b.gen, b.gm, b.data, nbytes, 4, sub="large")
    sdir = os.path.dirname(first)
    mnt = os.path.join(b.data, "mnt", "large")
    p = b.start_daemon("large", [b.gm, "-f", sdir, mnt], mnt, os.path.join(mnt, "llama.gguf"))
    targets = {"file": model, "mount": os.path.join(mnt, "llama.gguf")}
    runs_n = min(b.a.runs, 3)
    res = {"model_bytes": os.path.getsize(model), "layers": info["layers"], "runs": runs_n, "rows": {}}
    why = rc.clients_ready(b.gm)
    res["llama_skipped"] = why
    try:
        for mode in list(MODES) + ([] if why else list(LOADS)):
            for state in ("cold", "warm"):
                if state in b.a.skip_states:
                    continue
                runs = {t: [] for t in targets}
                for i in range(runs_n):
                    for t in (list(targets) if i % 2 == 0 else list(targets)[::-1]):
                        runs[t].append(_one(b, mode, state, targets[t]))
                res["rows"]["%s %s" % (mode, state)] = runs
                log("large %s %s: file %.2f s, mount %.2f s" % (
                    mode, state, statistics.median(r["seconds"] for r in runs["file"]),
                    statistics.median(r["seconds"] for r in runs["mount"])))
    finally:
        b.stop_daemon(mnt, p)
    b.results["large"] = res


def _one(b, mode, state, path):
    """One measurement of `mode` on `path` in cache state `state`: {"seconds", ...}."""
    def drop():
        b.drop_caches()
        if state == "warm":
            b.reader(["seq", "--file", path])
    if mode in MODES:
        drop()
        r = b.reader(MODES[mode] + ["--file", path])
        return {"seconds": r["seconds"], "minflt": r.get("minflt")}
    r = rc.first_token(lambda: path, None, drop, [LOADS[mode], "load-only"])
    return {"seconds": r["load_ms"] / 1000.0, "cpu_s": r["load_cpu_s"], "runq_s": r["load_runq_s"]}


def large_table(res):
    """The load-mode rows as markdown lines (empty without a large section)."""
    v = res.get("large")
    if not v:
        return []
    gib = v["model_bytes"] / GIB
    lines = ["Load modes of a %.2f GiB llama model (%d layers): the file on disk against the merged file "
             "through a mount of its 4 shards; seconds, median (min–max) of %d runs; ratio = file time / "
             "mount time (1 = as fast)." % (gib, v["layers"], v["runs"]), ""]
    if v.get("llama_skipped"):
        lines += ["node-llama-cpp rows skipped: " + v["llama_skipped"], ""]
    lines.append("| mode | cache | file s | mount s | file / mount | mount extra s per GiB "
                 "| loader CPU s: file, mount (file / mount) |")
    lines.append("|---|---|---|---|---|---|---|")
    for key, runs in v["rows"].items():
        mode, state = key.rsplit(" ", 1)
        f = [r["seconds"] for r in runs["file"]]
        m = [r["seconds"] for r in runs["mount"]]
        fm, mm = statistics.median(f), statistics.median(m)
        fc = [r["cpu_s"] for r in runs["file"] if r.get("cpu_s")]
        mc = [r["cpu_s"] for r in runs["mount"] if r.get("cpu_s")]
        cpu = "–"
        if fc and mc:
            cpu = "%.2f, %.2f (%.2f)" % (statistics.median(fc), statistics.median(mc),
                                         statistics.median(fc) / statistics.median(mc))
        lines.append("| %s | %s | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) | **%.2f** | %.3f | %s |" % (
            LABEL[mode], state, fm, min(f), max(f), mm, min(m), max(m), fm / mm, (mm - fm) / gib, cpu))
    lines.append("")
    return lines
