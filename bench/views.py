"""Shard-view rows of the benchmark (bench.py --sections views).

- read: every shard of a shard view of DATA/model/full.gguf (`gguf-mount FILE MNT
  --split-max-tensors ceil(tensors/8)`, 8 shards; >= 2 GiB except with --quick) read
  sequentially in 1 MiB blocks, one after the other, against reading full.gguf itself; cold
  (caches dropped before each run) and warm (caches dropped, then that target alone filled by one
  sequential pass). Targets alternate run by run.
- startup: mount-to-readable of a view with 1,200 shards (DATA/shards1200, a 1,200-shard set,
  re-cut with --split-max-tensors 1), from starting `gguf-mount -f` under a soft limit of 1,024
  open files to the first byte of shard 1, cold and warm.
"""

import os
import statistics
import time


def run_views(b, log):
    """Measures the rows above with bench.Bench `b` (logging progress with `log`); stores them
    in b.results["views"]."""
    _measure(b, log)


def _read_all(b, files):
    """Sequential 1 MiB reads of `files` one after the other: (bytes, seconds)."""
    total, seconds = 0, 0.0
    for f in files:
        r = b.reader(["seq", "--file", f])
        total += r["bytes"]
        seconds += r["seconds"]
    return total, seconds


def _measure(b, log):
    per = -(-b.tensor_count() // 8)
    full = b.model_path()
    mnt = os.path.join(b.data, "mnt", "view")
    p = b.start_daemon("view", [b.gm, "-f", full, mnt, "--split-max-tensors", str(per)], mnt,
                       os.path.join(mnt, "full-00001-of-00008.gguf"))
    res = {"model_bytes": b.model_size, "split_max_tensors": per, "read": {}, "startup": {}}
    try:
        shards = sorted(os.path.join(mnt, f) for f in os.listdir(mnt))
        targets = {"view": shards, "file": [full]}
        for state in ("cold", "warm"):
            if state in b.a.skip_states:
                continue
            runs = {t: [] for t in targets}
            for i in range(b.a.runs):
                order = list(targets)[i % 2:] + list(targets)[:i % 2]
                for t in order:
                    b.drop_caches()
                    if state == "warm":
                        _read_all(b, targets[t])
                    n, s = _read_all(b, targets[t])
                    runs[t].append({"bytes": n, "seconds": s, "gib_s": n / s / float(1 << 30)})
                log("views read %s run %d: view %.2f GiB/s, file %.2f GiB/s" % (
                    state, i + 1, runs["view"][-1]["gib_s"], runs["file"][-1]["gib_s"]))
            res["read"][state] = runs
        res["shards"] = len(shards)
    finally:
        b.stop_daemon(mnt, p)

    smnt = os.path.join(b.data, "mnt", "view1200")
    os.makedirs(smnt, exist_ok=True)
    for state in ("cold", "warm"):
        times = []
        for i in range(2 * b.a.runs - 1 + (1 if state == "warm" else 0)):
            if state == "cold":
                b.drop_caches()
            b.cleanup.add(smnt, None)
            r = b.reader(["startup", "--path", os.path.join(smnt, "model-00001-of-01200.gguf"), "--log",
                          os.path.join(b.data, "run", "view1200.log"), "--", "prlimit", "--nofile=1024:", b.gm,
                          "-f", os.path.join(b.data, "shards1200"), smnt, "--split-max-tensors", "1"])
            b.cleanup.add(smnt, r["pid"])
            time.sleep(0.2)
            b.cleanup.unmount(smnt, r["pid"])
            if state == "warm" and i == 0:
                continue  # the unmeasured start that warms the caches
            times.append(r["ms"])
        res["startup"][state] = times
        log("views startup 1,200 shards %s: median %.1f ms" % (state, statistics.median(times)))
    b.results["views"] = res


def views_table(res):
    """The shard-view rows as markdown lines (empty without a views section)."""
    v = res.get("views")
    if not v:
        return []
    lines = ["| shard view (%d shards of %.2f GiB, --split-max-tensors %d) | view GiB/s | file GiB/s | view / file |" % (
        v.get("shards", 0), v["model_bytes"] / float(1 << 30), v["split_max_tensors"]), "|---|---|---|---|"]
    for state, runs in v["read"].items():
        gv = statistics.median(r["gib_s"] for r in runs["view"])
        gf = statistics.median(r["gib_s"] for r in runs["file"])
        lines.append("| read every shard, %s | %.2f | %.2f | **%.2f** |" % (state, gv, gf, gv / gf))
    lines.append("")
    lines.append("| mount-to-readable, view of 1,200 shards | median ms (min–max) |")
    lines.append("|---|---|")
    for state, ms in v["startup"].items():
        lines.append("| %s | %.1f (%.1f–%.1f) |" % (state, statistics.median(ms), min(ms), max(ms)))
    lines.append("")
    return lines
