"""KV-override rows of the benchmark (bench.py --sections kv), issue 22: what a sidecar
(NAME.gguf.kv) costs a mount.

The same shard sets with and without a sidecar, in one run: DATA/kv/set1200 and DATA/kv/set8
hold hard links to the files of DATA/shards1200 and DATA/shards8 (the same inodes: no copy)
plus model.gguf.kv, which changes general.name and appends a chat template (SIDECAR below).

- startup: mount-to-readable of the 1,200-shard set with the sidecar against without, cold and
  warm, runs alternating (bench.Bench.mount_to_readable).
- read: the merged model.gguf of the 8-shard set read sequentially (1 MiB preads) through a
  mount with the sidecar against a mount without, cold and warm (views.measure_reads).
"""

import os
import statistics

import views

SIDECAR = """# bench: a model name and a chat template fixed without a copy
general.name=str:bench model (fixed)
tokenizer.chat_template=str:{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}<|assistant|>
"""


def linked_set(b, src, name):
    """DATA/kv/NAME: hard links to every file of DATA/SRC and the sidecar model.gguf.kv
    (made once; refreshed when a link no longer names the same inode)."""
    d = os.path.join(b.data, "kv", name)
    os.makedirs(d, exist_ok=True)
    s = os.path.join(b.data, src)
    for f in os.listdir(s):
        target, link = os.path.join(s, f), os.path.join(d, f)
        if os.path.exists(link) and os.stat(link).st_ino == os.stat(target).st_ino:
            continue
        if os.path.lexists(link):
            os.unlink(link)
        os.link(target, link)
    with open(os.path.join(d, "model.gguf.kv"), "w") as f:
        f.write(SIDECAR)
    return d


def run_kv(b, log):
    """Measures the rows above with bench.Bench `b`; stores them in b.results["kv"]."""
    res = {"sidecar": SIDECAR, "startup": {}, "read": {}}
    sets = {"plain": os.path.join(b.data, "shards1200"), "sidecar": linked_set(b, "shards1200", "set1200")}
    mnt = os.path.join(b.data, "mnt", "kv1200")
    for state in ("cold", "warm"):
        times = {k: [] for k in sets}
        n = 2 * b.a.runs - 1
        for i in range(n + (1 if state == "warm" else 0)):
            for k in (list(sets) if i % 2 == 0 else list(sets)[::-1]):
                ms, _ = b.mount_to_readable(sets[k], mnt, "model.gguf", [], state == "cold", "kv1200")
                if state == "warm" and i == 0:
                    continue
                times[k].append(ms)
        res["startup"][state] = times
        log("kv startup 1,200 shards %s: sidecar %.1f ms, plain %.1f ms" % (
            state, statistics.median(times["sidecar"]), statistics.median(times["plain"])))

    d8 = {"plain": os.path.dirname(b.first8), "sidecar": linked_set(b, "shards8", "set8")}
    daemons, targets, pids = [], {}, {}
    try:
        for k, src in d8.items():
            m = os.path.join(b.data, "mnt", "kv8-" + k)
            p = b.start_daemon("kv8-" + k, [b.gm, "-f", src, m], m, os.path.join(m, "model.gguf"))
            daemons.append((m, p))
            targets[k] = [os.path.join(m, "model.gguf")]
            pids[k] = p.pid
        res["bytes"] = {k: os.path.getsize(t[0]) for k, t in targets.items()}
        res["read"] = views.measure_reads(b, log, "kv read", targets, pids)
    finally:
        for m, p in daemons:
            b.stop_daemon(m, p)
    b.results["kv"] = res


def kv_table(res):
    """The KV-override rows as markdown lines (empty without a kv section)."""
    v = res.get("kv")
    if not v:
        return []
    lines = ["KV overrides: the same sets with and without a sidecar `model.gguf.kv` (a new name and a "
             "chat template; hard links, same inodes), one run, runs alternating; median (min–max).", ""]
    lines.append("| mount-to-readable, 1,200 shards | with sidecar ms | without ms | with / without |")
    lines.append("|---|---|---|---|")
    for state, ms in v["startup"].items():
        lines.append("| %s | %s | %s | **%.2f** |" % (state, views.fmt_range(ms["sidecar"], "%.1f"),
                                                     views.fmt_range(ms["plain"], "%.1f"),
                                                     statistics.median(ms["sidecar"]) / statistics.median(ms["plain"])))
    lines.append("")
    if v["read"]:
        lines += views.read_table(v["read"], ["plain", "sidecar"], "plain",
                                  "merged file of 8 shards (%.2f GiB), sequential read" % (
                                      v["bytes"]["sidecar"] / float(1 << 30)))
    return lines
