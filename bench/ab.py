#!/usr/bin/env python3
"""Two builds of gguf-mount through the benchmark in one run, every figure paired.

  sudo python3 bench/ab.py --before OLD/gguf-mount [--after NEW/gguf-mount] [--runs 3]
                           [--parts matrix,local,remote] [--name NAME]

- matrix: bench/bench.py's read matrix with --before as a variant column: both builds read in
  the same cells, one after the other (per-cell interleaving, the driver's own).
- local: bench/bench.py --sections startup,offline (mount-to-readable of the 8- and 1,200-shard
  sets, daemon peak RSS, merge and split against cp) once per run and build, the builds
  alternating (ABBA...), each run its own bench.py call with --runs 1.
- remote: bench/remote.py --rows cold,remount,open1200,rss,merge (cold read and cached remount
  against curl and a local mount, the 1,200-shard remote mount, daemon RSS, merge of a URL)
  the same way, alternating per run.
Then every number both builds reported is paired: the median over the runs of each build, and
after / before. Per-row ratios of the drivers (e.g. mount / direct) are pairs too: compare them,
not absolute figures, on a shared 2-vCPU VM.

Writes bench/results/NAME.{md,json} (default NAME: ab-DATE). Uses build-bench/ (run
bench/run.sh once, or the cmake line in it) for bench_gen and bench_reader; --after defaults to
build-bench/gguf-mount. Only 127.0.0.1 is contacted (the drivers' own servers).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Leaves that describe the run, not a measured figure of the build.
SKIP = {"env", "load", "load_end", "load_start", "load_samples_1min", "notes", "targets", "date", "runs",
        "bytes", "apparent_bytes", "merged_bytes", "shard_bytes", "model_bytes", "shards", "merged_header_bytes",
        "one_block_per_shard_bytes", "limit_rate_MBps", "layers", "tokens"}


def flatten(node, path, out):
    """Numeric leaves of a results JSON as {path: value}. Lists of objects are keyed by their
    string fields (a row's pattern, state, set...), so both builds' rows pair up by name; a list
    of numbers is its median."""
    if isinstance(node, bool):
        return
    if isinstance(node, (int, float)):
        out[path] = float(node)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k not in SKIP:
                flatten(v, path + "/" + str(k) if path else str(k), out)
    elif isinstance(node, list) and node and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                 for x in node):
        out[path] = float(statistics.median(node))  # a row's own repetitions (ms of each mount)
    elif isinstance(node, list) and node and all(isinstance(x, dict) for x in node):
        for i, x in enumerate(node):
            label = " ".join(str(v) for k, v in sorted(x.items()) if isinstance(v, str)) or str(i)
            flatten(x, path + "[" + label + "]", out)


def medians(files):
    """(median, min, max) per leaf over the JSON files of one build."""
    per = {}
    for f in files:
        flat = {}
        flatten(json.load(open(f)), "", flat)
        for k, v in flat.items():
            per.setdefault(k, []).append(v)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in per.items()}


def run(cmd):
    print("ab: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def link_build(dirname, gm, helpers):
    """A build directory for bench.py: `gm` as its gguf-mount, the helpers of build-bench."""
    os.makedirs(os.path.join(dirname, "bench"), exist_ok=True)
    for src, dst in ((gm, "gguf-mount"), (os.path.join(helpers, "bench", "bench_gen"), "bench/bench_gen"),
                     (os.path.join(helpers, "bench", "bench_reader"), "bench/bench_reader")):
        d = os.path.join(dirname, dst)
        if os.path.lexists(d):
            os.unlink(d)
        os.symlink(os.path.abspath(src), d)
    return dirname


def table(title, before, after):
    """Rows of every figure both builds have: median (min-max) of each, the ratio of the
    medians, and whether the two ranges overlap (no: the difference is larger than the run's
    own spread, in one direction or the other; which is better depends on the figure)."""
    lines = ["## " + title, "", "| figure | before | after | after / before | ranges overlap |",
             "|---|---|---|---|---|"]
    for k in sorted(set(before) & set(after)):
        (b, b0, b1), (a, a0, a1) = before[k], after[k]
        ratio = "%.2f" % (a / b) if b else "–"
        overlap = "yes" if a0 <= b1 and b0 <= a1 else "**no**"
        lines.append("| %s | %.4g (%.4g–%.4g) | %.4g (%.4g–%.4g) | %s | %s |" % (k, b, b0, b1, a, a0, a1, ratio, overlap))
    return lines + [""]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the gguf-mount binary to compare against")
    ap.add_argument("--after", default=os.path.join(REPO, "build-bench", "gguf-mount"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parts", default="matrix,local,remote")
    ap.add_argument("--data", default=os.path.join(REPO, "bench", "data"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--name", default="ab-" + datetime.date.today().isoformat())
    ap.add_argument("--render", action="store_true",
                    help="only pair again the per-run results a run left in DATA/ab/results")
    a = ap.parse_args()
    helpers = os.path.join(REPO, "build-bench")
    work = os.path.join(a.data, "ab")
    raw = os.path.join(work, "results")
    os.makedirs(raw, exist_ok=True)
    builds = {"before": link_build(os.path.join(work, "before"), a.before, helpers),
              "after": link_build(os.path.join(work, "after"), a.after, helpers)}
    bench = [sys.executable, os.path.join(REPO, "bench", "bench.py"), "--data", a.data, "--out", raw]
    parts = a.parts.split(",")
    t0 = datetime.datetime.now()
    lines = ["# Two builds, one run: %s" % a.name, "",
             "before: `%s`; after: `%s`. %d runs per build, alternating (matrix: per cell). Started %s." % (
                 os.path.realpath(a.before), os.path.realpath(a.after), a.runs, t0.isoformat(timespec="seconds")),
             ""]
    result = {}
    if a.render:
        parts = [p for p in parts if p != "matrix"] + (["matrix-render"] if "matrix" in parts else [])
    if "matrix-render" in parts:
        lines += ["## Read matrix", "", "The `before` column of `%s-matrix.md` (copied here):" % a.name, ""]
        md = open(os.path.join(raw, a.name + "-matrix.md")).read().splitlines()
        lines += [l for l in md if l.startswith("|")][:40] + [""]
    if "matrix" in parts:
        run(bench + ["--sections", "matrix", "--build", builds["after"], "--runs", str(a.runs), "--no-ptll",
                     "--variant", "before|%s||" % os.path.abspath(a.before), "--name", a.name + "-matrix"])
        lines += ["## Read matrix", "", "The `before` column of `%s-matrix.md` (copied here):" % a.name, ""]
        md = open(os.path.join(raw, a.name + "-matrix.md")).read().splitlines()
        lines += [l for l in md if l.startswith("|")][:40] + [""]
    files = {"local": {"before": [], "after": []}, "remote": {"before": [], "after": []}}
    for i in range(a.runs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for which in order:
            if a.render:
                for part in ("local", "remote"):
                    f = os.path.join(raw, "%s-%s-%s-%d.json" % (a.name, part, which, i))
                    if part in parts and os.path.exists(f):
                        files[part][which].append(f)
                continue
            if "local" in parts:
                name = "%s-local-%s-%d" % (a.name, which, i)
                run(bench + ["--sections", "startup,offline", "--build", builds[which], "--runs", "1", "--no-ptll",
                             "--name", name])
                files["local"][which].append(os.path.join(raw, name + ".json"))
            if "remote" in parts:
                name = "%s-remote-%s-%d" % (a.name, which, i)
                run([sys.executable, os.path.join(REPO, "bench", "remote.py"), "--build", builds[which],
                     "--gm", os.path.abspath(builds[which] + "/gguf-mount"), "--runs", "1", "--out", raw,
                     "--name", name, "--rows", "cold,remount,open1200,rss,merge"])
                files["remote"][which].append(os.path.join(raw, name + ".json"))
    for part, title in (("local", "Startup, RSS, merge and split (bench.py startup,offline)"),
                        ("remote", "Remote (remote.py cold, remount, open1200, rss, merge)")):
        if part not in parts:
            continue
        b, af = medians(files[part]["before"]), medians(files[part]["after"])
        result[part] = {"before": b, "after": af}
        lines += table(title, b, af)
    if not a.render:
        lines.append("Wall time %d s. Load average at the end: %s." % (
            (datetime.datetime.now() - t0).total_seconds(), " ".join("%.2f" % x for x in os.getloadavg())))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, a.name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(a.out, a.name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
