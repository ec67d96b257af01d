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

More rows of issue 32 (`--large-rows`, all by default):
- folios (item 3): bench/trace-folios.sh on the merged file through a mount against a shard on
  ext4 (the first 1 GiB of each): the page-cache folio sizes this kernel gives each, and a verdict
  line "FUSE large folios: ..." that turns to "yes" the day a kernel gives the mount's file folios
  above 4 KiB;
- loaders (item 4): 4 node-llama-cpp loadModel processes started together on the same model,
  all from the file or all through one mount (a node serving several replicas), cold, mmap on
  (the 8.5 GiB model) and off (a 3 GiB model: 4 loaders without mmap each hold a copy of the model
  in their own memory, 4 x 8.5 GiB does not fit in 24 GiB); wall time until the last one has
  loaded, and the page cache held: the peak charged to a memory cgroup holding the loaders and the
  daemon (bench/memgroup.py), `fincore` of the files after the loads, and /proc/meminfo Cached
  (which also counts other processes);
- remote, memlimit (item 5): bench/large_remote.py.
"""

import json
import os
import re
import statistics
import subprocess
import threading
import time

import large_remote
import memgroup
import real_client as rc

GIB = float(1 << 30)
MODES = {"seq": ["seq", "--bs", "1048576"], "touch": ["touch"], "populate": ["touch", "--populate"]}
LABEL = {"seq": "read(), 1 MiB", "touch": "mmap + touch", "populate": "mmap MAP_POPULATE + touch",
         "load-mmap": "loadModel, mmap on", "load-no-mmap": "loadModel, mmap off",
         "load-direct-io": "loadModel, direct I/O"}
LOADS = {"load-mmap": "mmap", "load-no-mmap": "no-mmap", "load-direct-io": "direct-io"}
LOADERS = 4
MID_BYTES = 3 << 30  # the model of the mmap-off loaders row and of the remote rows (35 layers, 2.9 GiB)
TRACE_BYTES = 1 << 30  # bytes of each file bench/trace-folios.sh reads and maps
ROWS = ("modes", "folios", "loaders", "remote", "memlimit")


def run_large(b, log):
    """Measures the rows above with bench.Bench `b`; stores them in b.results["large"]."""
    rows = b.a.large_rows.split(",")
    bad = set(rows) - set(ROWS)
    if bad:
        raise SystemExit("--large-rows: unknown %s (rows: %s)" % (",".join(sorted(bad)), ",".join(ROWS)))
    nbytes = (64 << 20) if b.a.quick else (17 << 29)  # quick: 1 layer; full: 8.5 GiB -> 99 layers
    model, first, info = rc.gen_llama(b.gen, b.gm, b.data, nbytes, 4, sub="large")
    sdir = os.path.dirname(first)
    mnt = os.path.join(b.data, "mnt", "large")
    p = b.start_daemon("large", [b.gm, "-f", sdir, mnt], mnt, os.path.join(mnt, "llama.gguf"))
    targets = {"file": model, "mount": os.path.join(mnt, "llama.gguf")}
    ref = getattr(b.a, "large_ref_gm", None)
    ref_mnt, ref_p = os.path.join(b.data, "mnt", "large-before"), None
    runs_n = min(b.a.runs, 3)
    res = {"model_bytes": os.path.getsize(model), "layers": info["layers"], "runs": runs_n, "rows": {},
           "large_rows": rows}
    why = rc.clients_ready(b.gm)
    res["llama_skipped"] = why
    b.results["large"] = res
    try:
        if ref:  # --large-ref-gm: the same rows through a mount by that build, in the same runs
            ref_p = b.start_daemon("large-before", [ref, "-f", sdir, ref_mnt], ref_mnt, os.path.join(ref_mnt, "llama.gguf"))
            targets["before"] = os.path.join(ref_mnt, "llama.gguf")
            res["ref_gm"] = ref
        if "folios" in rows:
            res["folios"] = trace_folios(b, targets["mount"], first, log)
        for mode in (list(MODES) + ([] if why else list(LOADS))) if "modes" in rows else []:
            for state in ("cold", "warm"):
                if state in b.a.skip_states:
                    continue
                runs = {t: [] for t in targets}
                names = list(targets)
                for i in range(runs_n):  # interleaved: each target first in turn (2 targets: alternating)
                    for t in names[i % len(names):] + names[:i % len(names)]:
                        runs[t].append(_one(b, mode, state, targets[t]))
                res["rows"]["%s %s" % (mode, state)] = runs
                log("large %s %s: file %.2f s, mount %.2f s" % (
                    mode, state, statistics.median(r["seconds"] for r in runs["file"]),
                    statistics.median(r["seconds"] for r in runs["mount"])))
    finally:
        b.stop_daemon(mnt, p)
        if ref_p:
            b.stop_daemon(ref_mnt, ref_p)
    mid = None
    if not why and ({"loaders", "remote", "memlimit"} & set(rows)):
        mid = rc.gen_llama(b.gen, b.gm, b.data, (64 << 20) if b.a.quick else MID_BYTES, 4, sub="large-mid")
    if "loaders" in rows and not why:
        res["loaders"] = {}
        for mode, (m_model, m_first) in (("mmap", (model, first)), ("no-mmap", mid[:2])):
            res["loaders"][mode] = loaders_row(b, m_model, m_first, mode, runs_n, log)
    if ({"remote", "memlimit"} & set(rows)) and not why:
        large_remote.run(b, mid, rows, runs_n, res, log)


def trace_folios(b, merged, shard, log):
    """bench/trace-folios.sh on the first TRACE_BYTES of the merged file (through the mount) and of
    a shard on the local file system: {"mount"|"file": {"folio_kib": {size KiB: share of bytes},
    "faults", "fault_around_kib"}, "large_folios_on_fuse": bool, "text": its output}; an "error"
    instead when the script cannot run (not root, no tracefs)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace-folios.sh")
    r = subprocess.run(["bash", script, "--bytes", str(TRACE_BYTES), merged, shard], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log("trace-folios: " + r.stdout.strip()[-300:])
        return {"error": r.stdout.strip()[-300:]}
    out = {"text": r.stdout}
    for name, part in zip(("mount", "file"), r.stdout.split("== ")[1:]):
        shares = {int(k): float(v) for k, v in re.findall(r"(\d+) KiB folios: +\d+ \( *([\d.]+) %", part)}
        faults = re.search(r"reached the file \(mm_filemap_fault\): (\d+)", part)
        around = re.search(r"mapping on average (\d+) KiB", part)
        out[name] = {"folio_kib": shares, "faults": int(faults.group(1)) if faults else None,
                     "fault_around_kib": int(around.group(1)) if around else None}
    m = out.get("mount", {}).get("folio_kib", {})
    out["large_folios_on_fuse"] = any(int(k) > 4 and v > 0 for k, v in m.items())
    log("folios: " + folio_verdict(out))
    return out


def folio_verdict(f):
    """One line: whether this kernel gives the mount's file large folios (from trace_folios)."""
    if "error" in f:
        return "FUSE large folios: not measured (%s)" % f["error"].splitlines()[-1]
    def share(name):
        return ", ".join("%d KiB %.1f %%" % (k, v) for k, v in sorted((int(k), v) for k, v in f[name]["folio_kib"].items()))
    return "FUSE large folios: **%s** (merged file through the mount: %s; shard on the local file system: %s)" % (
        "yes" if f["large_folios_on_fuse"] else "no", share("mount") or "none", share("file") or "none")


def fincore(paths):
    """Bytes of `paths` in the page cache (util-linux fincore)."""
    r = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES"] + list(paths), stdout=subprocess.PIPE, text=True)
    return sum(int(x) for x in r.stdout.split())


def _meminfo_cached():
    for line in open("/proc/meminfo"):
        if line.startswith("Cached:"):
            return int(line.split()[1]) * 1024
    return 0


def _loaders_once(b, target, model, first, mode, log):
    """One cold run of LOADERS loaders of `model` (target "file") or of the merged file of `first`'s
    set through a new mount (target "mount"), all in one memory cgroup with the daemon."""
    b.drop_caches()
    g = memgroup.MemGroup("gguf-bench-loaders")
    procs, p, mnt = [], None, None
    try:
        if target == "mount":
            mnt = os.path.join(b.data, "mnt", "loaders")
            p = b.start_daemon("loaders", g.prefix() + [b.gm, "-f", os.path.dirname(first), mnt], mnt,
                               os.path.join(mnt, "llama.gguf"))
            path = os.path.join(mnt, "llama.gguf")
            files = [path] + sorted(os.path.join(os.path.dirname(first), f) for f in os.listdir(os.path.dirname(first)))
        else:
            path, files = model, [model]
        for _ in range(LOADERS):
            procs.append(subprocess.Popen(g.prefix() + ["node", rc.FIRST_TOKEN, rc.CLIENTS, mode, "load-only"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for q in procs:
            if '"ready"' not in q.stdout.readline():
                raise RuntimeError("first-token.mjs did not start: " + q.stderr.read()[-2000:])
        cached0 = _meminfo_cached()
        g.start_sampling()
        done = [None] * LOADERS
        t0 = time.monotonic()
        for q in procs:
            q.stdin.write(path + "\n")
            q.stdin.flush()

        def wait(i):
            line = procs[i].stdout.readline()
            done[i] = (time.monotonic() - t0, line)
        ws = [threading.Thread(target=wait, args=(i,)) for i in range(LOADERS)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        wall = max(d[0] for d in done)
        cached1 = _meminfo_cached()
        peak = g.peak_cache()
        for i, q in enumerate(procs):
            if not done[i][1].strip():
                raise RuntimeError("loader %d did not load %s: %s" % (i, path, q.stderr.read()[-2000:]))
            q.stdin.close()
            q.wait(timeout=60)
        held = fincore(files)
        loads = [json.loads(d[1])["load_ms"] / 1000.0 for d in done]
        return {"seconds": wall, "load_s": loads, "cgroup_peak_cache": peak, "fincore_after": held,
                "meminfo_cached_delta": cached1 - cached0, "oom_kills": g.oom_kills()}
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
        if p:
            b.stop_daemon(mnt, p)
        g.remove()


def loaders_row(b, model, first, mode, runs_n, log):
    """The loaders row for one load mode: {"model_bytes", "runs": {"file": [...], "mount": [...]}}."""
    runs = {"file": [], "mount": []}
    for i in range(runs_n):
        for t in (("file", "mount") if i % 2 == 0 else ("mount", "file")):
            runs[t].append(_loaders_once(b, t, model, first, mode, log))
            r = runs[t][-1]
            log("loaders %s %s run %d: %.2f s, cgroup peak cache %.2f GiB, fincore %.2f GiB" % (
                mode, t, i + 1, r["seconds"], r["cgroup_peak_cache"] / GIB, r["fincore_after"] / GIB))
    return {"model_bytes": os.path.getsize(model), "runs": runs}


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
    """The rows of the large section as markdown lines (empty without a large section)."""
    v = res.get("large")
    if not v:
        return []
    lines = []
    if "folios" in v:
        lines += ["**Page-cache folios** (`bench/trace-folios.sh --bytes %d`, read() then mmap + touch of the first "
                  "%d MiB of each; kernel %s): %s." % (TRACE_BYTES, TRACE_BYTES >> 20, res["env"]["kernel"],
                                                     folio_verdict(v["folios"])), ""]
        for name in ("mount", "file"):
            f = v["folios"].get(name)
            if f:
                lines.append("- %s: %s page faults reached the file, fault-around mapped %s KiB per call" % (
                    {"mount": "merged file through the mount", "file": "shard on the local file system"}[name],
                    f["faults"], f["fault_around_kib"]))
        lines.append("")
    if v.get("rows"):
        lines += modes_table(v)
    if v.get("loaders"):
        lines += loaders_table(v["loaders"])
    lines += large_remote.tables(v)
    return lines


def loaders_table(lo):
    """Markdown lines of the loaders rows."""
    lines = ["**%d loaders at once** (node-llama-cpp `loadModel`, load-only, started together; all from the file or "
             "all through one mount; cold: caches dropped before each run). Seconds until the last one loaded, "
             "median (min–max) of %d runs; ratio = file / mount. Page cache: the peak charged to a memory cgroup "
             "holding the loaders (and the daemon), and `fincore` of the model's files (merged file + shards for "
             "the mount) after the loads, both / the model's size (target <= 1.1x):" % (
                 LOADERS, len(next(iter(lo.values()))["runs"]["file"])), "",
             "| load mode | model GiB | file s | mount s | file / mount | cache peak / model: file, mount "
             "| fincore after / model: file, mount | OOM kills |", "|---|---|---|---|---|---|---|---|"]
    for mode, row in lo.items():
        gib = row["model_bytes"] / GIB
        f = [r["seconds"] for r in row["runs"]["file"]]
        m = [r["seconds"] for r in row["runs"]["mount"]]

        def ratio(t, key):
            return statistics.median(r[key] for r in row["runs"][t]) / row["model_bytes"]
        lines.append("| %s | %.2f | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) | **%.2f** | %.2f, %.2f | %.2f, %.2f | %d |" % (
            "mmap on" if mode == "mmap" else "mmap off", gib, statistics.median(f), min(f), max(f),
            statistics.median(m), min(m), max(m), statistics.median(f) / statistics.median(m),
            ratio("file", "cgroup_peak_cache"), ratio("mount", "cgroup_peak_cache"),
            ratio("file", "fincore_after"), ratio("mount", "fincore_after"),
            sum(r["oom_kills"] for t in row["runs"] for r in row["runs"][t])))
    lines.append("")
    return lines


def modes_table(v):
    """Markdown lines of the load-mode rows."""
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
    if v.get("ref_gm"):
        lines += ["**Before / after in the same runs**: the same rows through a second mount of the same shards by "
                  "`%s` (--large-ref-gm), its runs interleaved with the file's and this build's; ratio = file time / "
                  "mount time." % v["ref_gm"], "",
                  "| mode | cache | file s | before: mount s | after: mount s | before: file / mount | after: file / mount |",
                  "|---|---|---|---|---|---|---|"]
        for key, runs in v["rows"].items():
            if "before" not in runs:
                continue
            mode, state = key.rsplit(" ", 1)
            fm, bm, am = (statistics.median(r["seconds"] for r in runs[t]) for t in ("file", "before", "mount"))
            lines.append("| %s | %s | %.2f | %.2f | %.2f | %.2f | **%.2f** |" % (LABEL[mode], state, fm, bm, am,
                                                                            fm / bm, fm / am))
        lines.append("")
    return lines
