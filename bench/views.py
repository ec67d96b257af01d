"""Shard-view rows of the benchmark (bench.py --sections views), issue 23.

- read: every shard of a shard view of DATA/model/full.gguf (`gguf-mount FILE MNT
  --split-max-tensors ceil(tensors/8)`, 8 shards; >= 2 GiB except with --quick) read
  sequentially in 1 MiB blocks, one after the other, against, in the same run:
    file    full.gguf itself on the local file system (the target: view >= 0.9 x file);
    plain   full.gguf through a gguf-mount mount of its directory (a companion: the same FUSE
            path with no synthesized header, one source extent): FUSE's own cost;
    merged  the merged file of DATA/shards8 (the same model) through a mount of the set: the
            synthesized-header read path the view shares.
  Every target is read with the same reader and buffer (bench_reader seq, 1 MiB preads), cold
  (caches dropped before each run) and warm (caches dropped, then that target alone filled by
  one sequential pass). Targets rotate run by run. The daemon's CPU time (utime + stime) per
  read is recorded for the mounted targets.
- startup: mount-to-readable of a view with 1,200 shards (DATA/shards1200 re-cut with
  --split-max-tensors 1) against the merged mount of the same set, cold and warm, runs
  alternating, with the daemon's peak RSS.
"""

import os
import statistics

CLK_TCK = os.sysconf("SC_CLK_TCK")


def run_views(b, log):
    """Measures the rows above with bench.Bench `b` (logging progress with `log`); stores them
    in b.results["views"]."""
    res = {"model_bytes": b.model_size, "read": {}, "startup": {}, "rss": {}}
    _read_rows(b, log, res)
    _startup_rows(b, log, res)
    b.results["views"] = res


def cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads) in seconds, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(CLK_TCK)


def read_all(b, files):
    """Sequential 1 MiB reads of `files` one after the other: (bytes, seconds)."""
    total, seconds = 0, 0.0
    for f in files:
        r = b.reader(["seq", "--file", f])
        total += r["bytes"]
        seconds += r["seconds"]
    return total, seconds


def measure_reads(b, log, label, targets, pids):
    """Cold and warm sequential reads of `targets` (name -> list of files read one after the
    other), b.a.runs runs each, targets rotating; `pids` maps the mounted targets to their
    daemon. Returns {state: {name: [{"bytes", "seconds", "gib_s", "daemon_cpu_s"?}]}}."""
    out = {}
    names = list(targets)
    for state in ("cold", "warm"):
        if state in b.a.skip_states:
            continue
        runs = {t: [] for t in names}
        for i in range(b.a.runs):
            k = i % len(names)
            for t in names[k:] + names[:k]:
                b.drop_caches()
                if state == "warm":
                    read_all(b, targets[t])
                c0 = cpu_seconds(pids[t]) if t in pids else None
                n, s = read_all(b, targets[t])
                r = {"bytes": n, "seconds": s, "gib_s": n / s / float(1 << 30)}
                if c0 is not None:
                    r["daemon_cpu_s"] = cpu_seconds(pids[t]) - c0
                runs[t].append(r)
            log("%s %s run %d: %s" % (label, state, i + 1, "  ".join(
                "%s %.2f" % (t, runs[t][-1]["gib_s"]) for t in names)))
        out[state] = runs
    return out


def _read_rows(b, log, res):
    per = -(-b.tensor_count() // 8)
    full = b.model_path()
    mnt = os.path.join(b.data, "mnt")
    daemons = []
    try:
        vm = os.path.join(mnt, "view")
        p = b.start_daemon("view", [b.gm, "-f", full, vm, "--split-max-tensors", str(per)], vm,
                           os.path.join(vm, "full-00001-of-00008.gguf"))
        daemons.append((vm, p))
        pm = os.path.join(mnt, "plain")
        q = b.start_daemon("plain", [b.gm, "-f", os.path.dirname(full), pm], pm, os.path.join(pm, "full.gguf"))
        daemons.append((pm, q))
        mm = os.path.join(mnt, "merged")
        r = b.start_daemon("merged", [b.gm, "-f", os.path.dirname(b.first8), mm], mm, os.path.join(mm, "model.gguf"))
        daemons.append((mm, r))
        shards = sorted(os.path.join(vm, f) for f in os.listdir(vm))
        targets = {"view": shards, "file": [full], "plain": [os.path.join(pm, "full.gguf")],
                   "merged": [os.path.join(mm, "model.gguf")]}
        pids = {"view": p.pid, "plain": q.pid, "merged": r.pid}
        res["split_max_tensors"] = per
        res["shards"] = len(shards)
        res["merged_bytes"] = os.path.getsize(targets["merged"][0])
        res["read"] = measure_reads(b, log, "views read", targets, pids)
    finally:
        for m, d in daemons:
            b.stop_daemon(m, d)


def _startup_rows(b, log, res):
    src = os.path.join(b.data, "shards1200")
    smnt = os.path.join(b.data, "mnt", "view1200")
    kinds = {"view": (["--split-max-tensors", "1"], "model-00001-of-01200.gguf"), "merged": ([], "model.gguf")}
    for state in ("cold", "warm"):
        times = {k: [] for k in kinds}
        hwm = {k: [] for k in kinds}
        n = 2 * b.a.runs - 1
        for i in range(n + (1 if state == "warm" else 0)):
            for k in (list(kinds) if i % 2 == 0 else list(kinds)[::-1]):
                extra, probe = kinds[k]
                ms, peak = b.mount_to_readable(src, smnt, probe, extra, state == "cold", "view1200")
                if state == "warm" and i == 0:
                    continue  # the unmeasured start that warms the caches
                times[k].append(ms)
                hwm[k].append(peak)
        res["startup"][state] = times
        res["rss"][state] = hwm
        log("views startup 1,200 shards %s: view %.1f ms, merged %.1f ms" % (
            state, statistics.median(times["view"]), statistics.median(times["merged"])))


def fmt_range(xs, f="%.2f"):
    """"MEDIAN (MIN–MAX)" of `xs` in format `f`."""
    return (f + " (" + f + "–" + f + ")") % (statistics.median(xs), min(xs), max(xs))


def read_table(read, cols, base, title):
    """Markdown rows for measure_reads() output `read`: GiB/s of each of `cols`, and each
    target's ratio to `base`."""
    others = [c for c in cols if c != base]
    lines = ["| %s | %s | %s |" % (title, " | ".join("%s GiB/s" % c for c in cols),
                                   " | ".join("%s / %s" % (c, base) for c in others)),
             "|---|" + "---|" * (len(cols) + len(others))]
    for state, runs in read.items():
        med = {c: statistics.median(r["gib_s"] for r in runs[c]) for c in cols}
        lines.append("| %s | %s | %s |" % (state, " | ".join(fmt_range([r["gib_s"] for r in runs[c]]) for c in cols),
                                           " | ".join("**%.2f**" % (med[c] / med[base]) for c in others)))
    cpu = []
    for state, runs in read.items():
        for c in cols:
            xs = [r["daemon_cpu_s"] / (r["bytes"] / float(1 << 30)) for r in runs[c] if "daemon_cpu_s" in r]
            if xs:
                cpu.append("%s %s %.2f" % (c, state, statistics.median(xs)))
    lines.append("")
    if cpu:
        lines.append("Daemon CPU seconds per GiB read (median): " + "; ".join(cpu) + ".")
        lines.append("")
    return lines


def views_table(res):
    """The shard-view rows as markdown lines (empty without a views section)."""
    v = res.get("views")
    if not v:
        return []
    lines = ["Shard view: %d shards of %.2f GiB (--split-max-tensors %d); plain = the file through a "
             "mount of its directory, merged = the same model merged from 8 shards through a mount "
             "(%.2f GiB). Every target read with 1 MiB preads; median (min–max) of %d runs." % (
                 v.get("shards", 0), v["model_bytes"] / float(1 << 30), v.get("split_max_tensors", 0),
                 v.get("merged_bytes", 0) / float(1 << 30), len(next(iter(v["read"].values()))["file"])
                 if v["read"] else 0), ""]
    if v["read"]:
        lines += read_table(v["read"], ["file", "plain", "merged", "view"], "file", "read every shard")
    lines.append("| mount-to-readable, 1,200 shards | view ms | merged mount ms | view / merged | peak RSS view, merged (MiB) |")
    lines.append("|---|---|---|---|---|")
    for state, ms in v["startup"].items():
        rss = v.get("rss", {}).get(state, {})
        peak = ", ".join("%.1f" % (max(x for x in rss.get(k, []) if x) / float(1 << 20)) if any(rss.get(k, [])) else "?"
                         for k in ("view", "merged"))
        lines.append("| %s | %s | %s | %.2f | %s |" % (state, fmt_range(ms["view"], "%.1f"), fmt_range(ms["merged"], "%.1f"),
                                                      statistics.median(ms["view"]) / statistics.median(ms["merged"]),
                                                      peak))
    lines.append("")
    return lines
