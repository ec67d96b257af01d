#!/usr/bin/python3
"""gguf-mount benchmark driver (run through bench/run.sh, which installs and builds first).

Measures, in one run and the same cache state, the merged file served by gguf-mount against
reading the same bytes directly from the shard files and through libfuse's passthrough_ll
example (-o cache=always), and writes bench/results/<name>.{md,json,png}.

Every mount is made by this script, recorded in DATA/run/, and removed on exit (normal exit,
exception, SIGINT/SIGTERM/SIGHUP); run.sh's EXIT trap removes whatever a killed driver left.
Only processes started here are ever signalled, by pid.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

import kv
import large
import oci
import real_client as rc
import views

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = float(1 << 30)
MIB = float(1 << 20)

# Stock passthrough_ll hits libfuse 3.14's per-request allocate+pread+free fallback for every
# read (fuse_reply_data with fd buffers and no splice capability); glibc then mmaps/munmaps
# each 128 KiB-1 MiB buffer, and every fresh page is expensive on a VM (bench/README.md).
# These malloc tunables keep the buffers in the heap so the baseline is not crippled by that.
PTLL_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def run(cmd, check=True, capture=True, env=None, timeout=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), (r.stderr or "")[-2000:]))
    return r


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def proc_status(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def read_text(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


class Cleanup:
    """Mounts and processes started by this run; removes them all on exit."""

    def __init__(self, rundir):
        self.rundir = rundir
        os.makedirs(rundir, exist_ok=True)
        self.mounts = []  # mountpoints
        self.pids = []    # daemons we started
        self._write()

    def _write(self):
        with open(os.path.join(self.rundir, "mounts"), "w") as f:
            f.write("".join(m + "\n" for m in self.mounts))
        with open(os.path.join(self.rundir, "pids"), "w") as f:
            f.write("".join("%d\n" % p for p in self.pids))

    def add(self, mnt, pid):
        if mnt not in self.mounts:
            self.mounts.append(mnt)
        if pid and pid not in self.pids:
            self.pids.append(pid)
        self._write()

    @staticmethod
    def is_mounted(mnt):
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == mnt for line in f)

    @staticmethod
    def alive(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().split(") ")[-1][0] != "Z"
        except OSError:
            return False

    def unmount(self, mnt, pid=None):
        for attempt in range(20):
            if not self.is_mounted(mnt):
                break
            r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
            if r.returncode != 0:
                time.sleep(0.25)
                if attempt >= 10:
                    subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
        if pid:
            for _ in range(100):
                if not self.alive(pid):
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if pid in self.pids:
                self.pids.remove(pid)
        if mnt in self.mounts:
            self.mounts.remove(mnt)
        self._write()

    def all(self):
        for m in list(self.mounts):
            self.unmount(m)
        for p in list(self.pids):
            if self.alive(p):
                try:
                    os.kill(p, signal.SIGTERM)
                except OSError:
                    pass
        self.pids = []
        self._write()


class Bench:
    def __init__(self, args):
        self.a = args
        self.data = os.path.abspath(args.data)
        self.build = os.path.abspath(args.build)
        self.gm = os.path.join(self.build, "gguf-mount")
        self.reader_bin = os.path.join(self.build, "bench", "bench_reader")
        self.gen = os.path.join(self.build, "bench", "bench_gen")
        self.cleanup = Cleanup(os.path.join(self.data, "run"))
        self.results = {"rows": [], "startup": [], "page_cache": {}, "rss": {}, "offline": [], "notes": []}
        self.can_drop = False
        self.load_samples = []

    # ---- environment -------------------------------------------------------------------

    def drop_caches(self, origin=()):
        """Drops the page cache (when permitted), then reads every file under each path of
        `origin` back into it: the files a test server on this machine serves (nginx's shards, the
        registry's storage, s3rver's store). A remote origin is another machine, with its own disk
        and cache: a server reading this machine's disk while the client writes its block cache
        to it would charge the client's cold rows for a contention no real deployment has. The
        client's side (block cache, downloads, page cache of what it reads) stays cold."""
        if not self.can_drop:
            return
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        files = []
        for top in origin:
            if os.path.isfile(top):
                files.append(top)
            for d, _, names in os.walk(top, followlinks=True):
                files += [os.path.join(d, n) for n in names if os.path.isfile(os.path.join(d, n))]
        for path in files:
            with open(path, "rb") as f:
                while f.read(8 << 20):
                    pass

    def check_drop(self):
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            self.can_drop = True
        except OSError as e:
            self.can_drop = False
            self.results["notes"].append(
                "drop_caches is not permitted here (%s): every 'cold' row ran with whatever the page cache held; "
                "treat cold numbers as warm-underlying" % e)
            log("WARNING: cannot drop caches (%s); cold rows are not cold" % e)

    def environment(self):
        def cmd_out(c):
            try:
                return run(c).stdout.strip()
            except Exception:
                return "?"
        cpu = "?"
        for line in read_text("/proc/cpuinfo").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        return {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "kernel": platform.release(),
            # The tree the run measured: its commit, and whether it had uncommitted changes.
            "commit": cmd_out(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
            "tree_dirty": cmd_out(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"]) not in ("", "?"),
            "libfuse": cmd_out(["pkg-config", "--modversion", "fuse3"]),
            "fuse_kernel_protocol": "7.%s" % read_text("/sys/module/fuse/parameters/protocol_minor", "?"),
            "cpus": os.cpu_count(),
            "cpu": cpu,
            "mem_gib": round(meminfo("MemTotal") / GIB, 1),
            "thp": read_text("/sys/kernel/mm/transparent_hugepage/enabled"),
            "fuse_max_pages_limit": read_text("/proc/sys/fs/fuse/max_pages_limit", "?"),
            "pipe_max_size": read_text("/proc/sys/fs/pipe-max-size", "?"),
            "lockdown": read_text("/sys/kernel/security/lockdown", "(securityfs not mounted)"),
            "filesystem": cmd_out(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", self.data]),
            "quick": self.a.quick,
            "runs": self.a.runs,
        }

    # ---- data --------------------------------------------------------------------------

    def gen_data(self):
        a = self.a
        model_bytes = (512 << 20) if a.quick else (4 << 30)
        spec = {"model_bytes": model_bytes, "vocab": 150000, "big_tensor_bytes": 64 << 20, "v": 2}
        marker = os.path.join(self.data, "DATA_SPEC.json")
        if os.path.exists(marker) and read_text(marker) == json.dumps(spec, sort_keys=True):
            log("data: reusing %s" % self.data)
        else:
            log("data: generating under %s (once)" % self.data)
            for d in ("model", "shards8", "shards1200", "shards1200big", "out"):
                shutil.rmtree(os.path.join(self.data, d), ignore_errors=True)
                os.makedirs(os.path.join(self.data, d))
            t0 = time.time()
            info = json.loads(run([self.gen, "dense", self.model_path(), "--bytes", str(model_bytes),
                                   "--vocab", "150000", "--seed", "1"]).stdout)
            with open(os.path.join(self.data, "DATA_INFO.json"), "w") as f:
                json.dump(info, f)
            per = -(-info["tensors"] // 8)
            run([self.gm, "split", "-q", "--split-max-tensors", str(per), self.model_path(),
                 os.path.join(self.data, "shards8", "model")])
            for name, tbytes in (("shards1200", 4096), ("shards1200big", 64 << 20)):
                src = os.path.join(self.data, "model", name + ".gguf")
                run([self.gen, "sparse", src, "--tensors", "1200", "--tensor-bytes", str(tbytes),
                     "--vocab", "150000", "--seed", "2"])
                run([self.gm, "split", "-q", "--split-max-tensors", "1", src, os.path.join(self.data, name, "model")])
                os.unlink(src)
            with open(marker, "w") as f:
                f.write(json.dumps(spec, sort_keys=True))
            log("data: done in %.0f s" % (time.time() - t0))
        self.first8 = self.first_shard("shards8")
        self.model_size = os.path.getsize(self.model_path())
        self.shard_files = sorted(os.path.join(self.data, "shards8", f) for f in os.listdir(os.path.join(self.data, "shards8")))

    def model_path(self):
        return os.path.join(self.data, "model", "full.gguf")

    def first_shard(self, d):
        names = sorted(f for f in os.listdir(os.path.join(self.data, d)) if re.search(r"-00001-of-\d{5}\.gguf$", f))
        return os.path.join(self.data, d, names[0])

    def build_ptll(self):
        out = os.path.join(self.data, "build", "passthrough_ll")
        src = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
            flags = run(["pkg-config", "--cflags", "--libs", "fuse3"]).stdout.split()
            run(["cc", "-O2", "-Wall", "-I", os.path.dirname(src), src] + flags + ["-o", out])
        return out

    # ---- mounts ------------------------------------------------------------------------

    def wait_readable(self, path, pid, timeout=30):
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                with open(path, "rb") as f:
                    if f.read(1):
                        return
            except OSError:
                pass
            if pid and not Cleanup.alive(pid):
                raise RuntimeError("daemon %d died before %s became readable" % (pid, path))
            time.sleep(0.01)
        raise RuntimeError("%s not readable after %d s" % (path, timeout))

    def start_daemon(self, name, cmd, mnt, probe, env_extra=None):
        os.makedirs(mnt, exist_ok=True)
        if Cleanup.is_mounted(mnt):
            self.cleanup.unmount(mnt)
        env = dict(os.environ)
        env.update(env_extra or {})
        logf = open(os.path.join(self.data, "run", name + ".log"), "a")
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        logf.close()
        self.cleanup.add(mnt, p.pid)
        self.wait_readable(probe, p.pid)
        return p

    def stop_daemon(self, mnt, p):
        self.cleanup.unmount(mnt, p.pid)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.terminate()
            p.wait(timeout=10)

    # ---- reader ------------------------------------------------------------------------

    def reader(self, args):
        r = run([self.reader_bin] + args)
        return json.loads(r.stdout.strip().splitlines()[-1])

    # ---- throughput matrix -------------------------------------------------------------

    def matrix(self):
        a = self.a
        mnt_root = os.path.join(self.data, "mnt")
        segdir = os.path.join(self.data, "run")
        direct_seg = os.path.join(segdir, "direct.seg")
        with open(direct_seg, "w") as f:
            f.write(run([self.reader_bin, "segments", self.first8]).stdout)
        shard_dir = os.path.dirname(self.first8)

        targets = {}  # name -> reader source args
        daemons = []  # (mnt, Popen)
        targets["direct"] = ["--seg", direct_seg]

        variants = [("mount", self.gm, [], {})]
        for spec in a.variant:
            name, _, rest = spec.partition("|")
            binary, _, rest = rest.partition("|")
            vargs, _, venv = rest.partition("|")
            env = dict(kv.split("=", 1) for kv in venv.split() if "=" in kv)
            variants.append((name, binary or self.gm, vargs.split(), env))
        try:
            for name, binary, vargs, env in variants:
                mnt = os.path.join(mnt_root, name)
                probe = os.path.join(mnt, "model.gguf")
                p = self.start_daemon(name, [binary, "-f"] + vargs + [shard_dir, mnt], mnt, probe, env)
                daemons.append((mnt, p))
                targets[name] = ["--file", probe]
                if name == "mount":
                    self.mount_pid = p.pid
            if not a.no_ptll:
                ptll = self.build_ptll()
                mnt = os.path.join(mnt_root, "ptll")
                env = {} if a.ptll_stock else {"GLIBC_TUNABLES": PTLL_MALLOC}
                p = self.start_daemon("ptll", [ptll, "-f", "-o", "source=%s,cache=always" % shard_dir, mnt], mnt,
                                      os.path.join(mnt, os.path.basename(self.first8)), env)
                daemons.append((mnt, p))
                ptll_seg = os.path.join(segdir, "ptll.seg")
                with open(direct_seg) as f, open(ptll_seg, "w") as g:
                    g.write(f.read().replace(shard_dir + "/", mnt + "/"))
                targets["ptll"] = ["--seg", ptll_seg]
            self.results["targets"] = list(targets)

            patterns = {
                "seq": ["seq", "--bs", "1048576"],
                "touch": ["touch"],
                "populate": ["touch", "--populate"],
                "rand": ["rand", "--count", str(a.rand_count), "--bs", "1048576", "--seed", "42"],
                "conc": ["conc", "--threads", "8", "--bs", "1048576"],
            }
            advice = [x for x in a.touch_advice.split(",") if x]
            for extra in advice:
                patterns["touch+" + extra] = ["touch", "--advise", extra]
            order = [p for p in a.patterns.split(",") if p] + ["touch+" + x for x in advice]
            for pat in order:
                # madvise rows compare gguf-mount with direct only (time budget).
                row_targets = targets if "+" not in pat else {k: v for k, v in targets.items()
                                                              if k in ("direct", "mount")}
                for state in ("cold", "warm"):
                    if state in a.skip_states:
                        continue
                    self.measure_row(pat, state, patterns[pat], row_targets)
            self.folios(targets)
            self.page_cache_and_rss(targets)
        finally:
            for mnt, p in daemons:
                if p.pid == getattr(self, "mount_pid", None):
                    self.results["rss"]["after_matrix_hwm"] = proc_status(p.pid, "VmHWM")
                    self.results["rss"]["after_matrix_rss"] = proc_status(p.pid, "VmRSS")
                self.stop_daemon(mnt, p)

    def measure_row(self, pat, state, pargs, targets):
        log("%s %s" % (pat, state))
        runs = {n: [] for n in targets}
        load0 = loadavg()
        for i in range(self.a.runs):
            names = list(targets)
            names = names[i % len(names):] + names[:i % len(names)]  # rotate who goes first
            for n in names:
                # Every run starts from dropped caches. Warm runs then fill this target alone with
                # one sequential read() pass: how fast a warm cache reads depends on which
                # physical pages it got (bench/README.md), so every
                # target gets the same treatment, and no target's fill evicts another's pages
                # (gguf-mount drops shard pages behind its reads).
                self.drop_caches()
                if state == "warm":
                    self.reader(["seq"] + targets[n])
                res = self.reader(pargs + targets[n])
                runs[n].append(res)
        load1 = loadavg()
        self.load_samples += [load0[0], load1[0]]
        row = {"pattern": pat, "state": state, "runs": runs, "load": [load0[0], load1[0]]}
        self.results["rows"].append(row)
        summ = summarize_row(row)
        log("   " + "  ".join("%s %.2f" % (n, summ[n]["median"]) for n in targets) +
            ("  ratio %.2f" % summ["ratio"] if summ.get("ratio") else ""))

    def folios(self, targets):
        """Folio sizes behind a warm mapping (cache filled by one read() pass), per target."""
        out = {}
        for name in ("direct", "mount"):
            if name not in targets:
                continue
            self.drop_caches()  # the same start for both (see measure_row)
            self.reader(["seq"] + targets[name])
            r = self.reader(["touch", "--folios"] + targets[name])
            out[name] = {"folio_bytes": r.get("folio_bytes", {}), "minflt": r["minflt"]}
        self.results["folios"] = out
        log("folio sizes: " + "; ".join("%s %s" % (k, v["folio_bytes"]) for k, v in out.items()))

    def page_cache_and_rss(self, targets):
        """Page cache held after one full sequential read of the mounted model from cold."""
        if "mount" not in targets:
            return
        pc = self.results["page_cache"]
        self.drop_caches()
        cached0 = meminfo("Cached")
        self.reader(["seq"] + targets["mount"])
        time.sleep(0.5)
        cached1 = meminfo("Cached")
        merged = targets["mount"][1]

        def fincore(paths):
            r = run(["fincore", "-b", "-n", "-r", "-o", "RES"] + paths)
            return sum(int(x) for x in r.stdout.split())
        pc["model_bytes"] = self.model_size
        pc["merged_file_cached"] = fincore([merged])
        pc["shards_cached"] = fincore(self.shard_files)
        pc["total_cached"] = pc["merged_file_cached"] + pc["shards_cached"]
        pc["meminfo_cached_delta"] = cached1 - cached0
        pc["ratio_total"] = pc["total_cached"] / self.model_size
        pc["ratio_meminfo"] = pc["meminfo_cached_delta"] / self.model_size
        self.results["rss"]["after_full_read_hwm"] = proc_status(self.mount_pid, "VmHWM")
        self.results["rss"]["after_full_read_rss"] = proc_status(self.mount_pid, "VmRSS")
        log("page cache after one read: merged %.2f GiB + shards %.2f GiB = %.2f x model (meminfo %.2f x)" % (
            pc["merged_file_cached"] / GIB, pc["shards_cached"] / GIB, pc["ratio_total"], pc["ratio_meminfo"]))
        # Warm re-read served by the FUSE inode's cache (keep_cache), for the record.
        pc["warm_reread_gib_s"] = self.reader(["seq"] + targets["mount"])["gib_s"]

    # ---- startup -----------------------------------------------------------------------

    def mount_to_readable(self, src, mnt, probe, extra, cold, log_name):
        """One start of `gguf-mount -f SRC MNT EXTRA...` (caches dropped first when `cold`):
        milliseconds until one byte of MNT/PROBE reads, and the daemon's VmHWM 0.2 s later
        (bytes); then unmounts. The daemon starts with the usual soft limit of 1,024
        descriptors (a systemd service or a login shell): 1,200 open shards need it raised."""
        os.makedirs(mnt, exist_ok=True)
        if cold:
            self.drop_caches()
        self.cleanup.add(mnt, None)
        res = self.reader(["startup", "--path", os.path.join(mnt, probe), "--log",
                           os.path.join(self.data, "run", log_name + ".log"), "--",
                           "prlimit", "--nofile=1024:", self.gm, "-f", src, mnt] + list(extra))
        self.cleanup.add(mnt, res["pid"])
        time.sleep(0.2)  # let the post-mount thread finish before sampling memory
        hwm = proc_status(res["pid"], "VmHWM")
        self.cleanup.unmount(mnt, res["pid"])
        return res["ms"], hwm

    def startup(self):
        sets = [("shards8", "8 shards, dense"), ("shards1200", "1,200 shards x 4 KiB"),
                ("shards1200big", "1,200 shards x 64 MiB (sparse)")]
        mnt = os.path.join(self.data, "mnt", "startup")
        os.makedirs(mnt, exist_ok=True)
        for d, label in sets:
            first = self.first_shard(d)
            files = [os.path.join(self.data, d, f) for f in os.listdir(os.path.join(self.data, d))]
            apparent = sum(os.path.getsize(f) for f in files)
            header = None
            for state in ("cold", "warm"):
                times, hwm = [], []
                # Warm: the metadata and header pages are cached (a restart); one unmeasured start first.
                # Starts are cheap and, on a loaded 2-vCPU VM, scheduling outliers are frequent:
                # twice the runs (9 by default) for a stable median.
                n = 2 * self.a.runs - 1
                for i in range(n + (1 if state == "warm" else 0)):
                    ms, peak = self.mount_to_readable(os.path.join(self.data, d), mnt, "model.gguf", [],
                                                      state == "cold", "startup")
                    hwm.append(peak)
                    if state == "warm" and i == 0:
                        continue
                    times.append(ms)
                if header is None:
                    header = json.loads(run([self.reader_bin, "info", first]).stdout)["header_bytes"]
                row = {"set": d, "label": label, "state": state, "shards": len(files), "apparent_bytes": apparent,
                       "merged_header_bytes": header, "ms": times, "daemon_hwm": hwm}
                self.results["startup"].append(row)
                log("startup %s %s: median %.1f ms (%s)" % (d, state, statistics.median(times),
                                                             " ".join("%.1f" % t for t in times)))

    # ---- offline -----------------------------------------------------------------------

    def timed(self, cmd):
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.monotonic() - t0
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise RuntimeError("%s failed: %s" % (" ".join(cmd), err[-1000:]))
        return dt, ru.ru_maxrss * 1024

    def offline(self):
        out = os.path.join(self.data, "out")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        full = self.model_path()
        size = self.model_size
        ops = {
            "merge": lambda: [self.gm, "merge", "-q", self.first8, os.path.join(out, "merged.gguf")],
            "cp (shards, + fsync)": lambda: ["sh", "-c", 'cp --reflink=never "$@" "%s/" && sync "%s"/*' % (out, out),
                                             "cp"] + self.shard_files,
            "split": lambda: [self.gm, "split", "-q", "--split-max-tensors",
                              str(-(-self.tensor_count() // 8)), full, os.path.join(out, "model")],
            "cp (model, + fsync)": lambda: ["sh", "-c", 'cp --reflink=never "$1" "%s/" && sync "%s"/*' % (out, out),
                                            "cp", full],
        }
        runs = {k: [] for k in ops}
        for i in range(self.a.runs):
            for name, cmd in ops.items():
                # Sources warm (the copy engine, not the disk read, is what differs).
                srcs = self.shard_files if name in ("merge", "cp (shards, + fsync)") else [full]
                for s in srcs:
                    self.reader(["seq", "--file", s])
                os.sync()
                dt, rss = self.timed(cmd())
                runs[name].append({"seconds": dt, "gib_s": size / dt / GIB, "max_rss": rss})
                for f in os.listdir(out):
                    os.unlink(os.path.join(out, f))
                os.sync()
            log("offline run %d: %s" % (i + 1, "  ".join("%s %.2f GiB/s" % (k, v[-1]["gib_s"]) for k, v in runs.items())))
        self.results["offline"] = runs

    # ---- real client: node-llama-cpp ----------------------------------------------------

    def llama(self):
        """Load + first token of node-llama-cpp (llama.cpp maps with MAP_POPULATE) on a random
        llama model, cold and warm: the merged file through a mount of its shards, the merged file
        on disk (`gguf-mount merge`), and llama.cpp given the first shard (it opens the others)."""
        why = rc.clients_ready(self.gm)
        if why:
            self.results["llama"] = {"skipped": why}
            log("llama: skipped: " + why)
            return
        nbytes = (64 << 20) if self.a.quick else (5 << 28)  # quick: 1 layer (89 MiB); full: 14 layers (1.18 GiB)
        _, first, info = rc.gen_llama(self.gen, self.gm, self.data, nbytes, 4)
        sdir = os.path.dirname(first)
        shards = sorted(os.path.join(sdir, f) for f in os.listdir(sdir))
        merged = os.path.join(self.data, "llama", "merged", "llama.gguf")
        if not os.path.exists(merged):
            os.makedirs(os.path.dirname(merged), exist_ok=True)
            run([self.gm, "merge", "-q", first, merged])
        mnt = os.path.join(self.data, "mnt", "llama")
        p = self.start_daemon("llama", [self.gm, "-f", sdir, mnt], mnt, os.path.join(mnt, "llama.gguf"))
        targets = {"mount": os.path.join(mnt, "llama.gguf"), "disk": merged, "shards": first}
        fill = {"mount": [targets["mount"]], "disk": [merged], "shards": shards}
        res = {"model_bytes": info["bytes"], "layers": info["layers"], "shards": len(shards), "runs": {}}
        try:
            for state in ("cold", "warm"):
                if state in self.a.skip_states:
                    continue
                runs = {t: [] for t in targets}
                for i in range(self.a.runs):
                    order = list(targets)[i % 3:] + list(targets)[:i % 3]
                    for t in order:
                        def drop(t=t):
                            self.drop_caches()
                            if state == "warm":
                                for f in fill[t]:
                                    self.reader(["seq", "--file", f])
                        runs[t].append(rc.first_token(lambda t=t: targets[t], None, drop))
                    log("llama %s run %d: %s" % (state, i + 1, "  ".join(
                        "%s %.2f s" % (t, v[-1]["total_s"]) for t, v in runs.items())))
                res["runs"][state] = runs
        finally:
            self.stop_daemon(mnt, p)
        self.results["llama"] = res

    def tensor_count(self):
        return json.loads(read_text(os.path.join(self.data, "DATA_INFO.json")))["tensors"]

    # ---- main --------------------------------------------------------------------------

    def main(self):
        t0 = time.time()
        self.check_drop()
        env = self.environment()
        env["load_start"] = loadavg()
        self.results["env"] = env
        if set(self.a.sections.split(",")) - {"llama", "large", "oci"}:  # those make their own models
            self.gen_data()
            env["model_bytes"] = self.model_size
        if "matrix" in self.a.sections:
            self.matrix()
        if "startup" in self.a.sections:
            self.startup()
        if "offline" in self.a.sections:
            self.offline()
        if "llama" in self.a.sections:
            self.llama()
        if "views" in self.a.sections:
            views.run_views(self, log)
        if "kv" in self.a.sections:
            kv.run_kv(self, log)
        if "large" in self.a.sections:
            large.run_large(self, log)
        if "oci" in self.a.sections.split(","):
            oci.run_oci(self, log)
        env["load_end"] = loadavg()
        env["load_samples_1min"] = self.load_samples
        env["wall_seconds"] = round(time.time() - t0)
        if self.a.sections != "oci" or self.a.name_given:  # the oci section alone writes only oci-DATE.*
            write_reports(self.results, self.a.out, self.a.name)


# ---- reporting -----------------------------------------------------------------------------

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize_row(row):
    s = {}
    for n, rs in row["runs"].items():
        g = [r["gib_s"] for r in rs]
        s[n] = {"median": med(g), "min": min(g), "max": max(g), "minflt": med([r["minflt"] for r in rs])}
    if "mount" in s and "direct" in s and s["direct"]["median"] > 0:
        s["ratio"] = s["mount"]["median"] / s["direct"]["median"]
    if "mount" in s and "ptll" in s and s["ptll"]["median"] > 0:
        s["ratio_ptll"] = s["mount"]["median"] / s["ptll"]["median"]
    return s


PATTERN_LABEL = {
    "seq": "sequential read, 1 MiB",
    "touch": "mmap + touch every page",
    "populate": "mmap MAP_POPULATE + touch",
    "rand": "4,096 random 1 MiB preads",
    "conc": "8 concurrent readers",
}


def fmt_gib(s):
    return "%.2f (%.2f–%.2f)" % (s["median"], s["min"], s["max"])


def write_reports(res, outdir, name):
    os.makedirs(outdir, exist_ok=True)
    env = res["env"]
    targets = res.get("targets", ["direct", "mount", "ptll"])
    lines = []
    lines.append("# gguf-mount benchmark: %s" % name)
    lines.append("")
    model = "Model %.2f GiB (%s bytes). " % (env["model_bytes"] / GIB, env["model_bytes"]) if env.get("model_bytes") else ""
    samples = env.get("load_samples_1min") or []
    during = "; during the matrix %s–%s" % (min(samples), max(samples)) if samples else ""
    lines.append("Kernel %s, libfuse %s, %s CPUs (%s), %.0f GiB RAM, THP `%s`, data on %s. "
                 "%s%d runs per cell; GiB/s = bytes / wall time; "
                 "**median (min–max)**. Load average (1 min) at start %s, end %s%s "
                 "(it counts the benchmark's own daemon threads and I/O waits, and anything else running on this "
                 "2-vCPU VM: compare same-row ratios, not absolute numbers across runs). "
                 "Date %s, wall time %d s.%s" % (
                     env["kernel"], env["libfuse"], env["cpus"], env["cpu"], env["mem_gib"], env["thp"],
                     env["filesystem"], model, env["runs"],
                     env["load_start"][0], env.get("load_end", [0])[0], during,
                     env["date"], env.get("wall_seconds", 0),
                     " Tree: %s%s." % (env["commit"], " with uncommitted changes" if env.get("tree_dirty") else "")
                     if env.get("commit") not in (None, "?") else ""))
    lines.append("")
    for n in res.get("notes", []):
        lines.append("> " + n)
        lines.append("")
    if res["rows"]:
        cols = [t for t in targets]
        head = "| pattern | cache | " + " | ".join({"direct": "direct (shards)", "mount": "gguf-mount",
                                                    "ptll": "passthrough_ll"}.get(c, c) for c in cols)
        head += " | mount / direct | mount / ptll | faults mount / direct |"
        lines.append(head)
        lines.append("|" + "---|" * (len(cols) + 5))
        for row in res["rows"]:
            s = summarize_row(row)
            pat = row["pattern"]
            label = PATTERN_LABEL.get(pat, pat)
            if pat.startswith("touch+"):
                label = "mmap + madvise(%s) + touch" % ("MADV_" + pat.split("+", 1)[1].upper())
            cells = [label, row["state"]]
            cells += [fmt_gib(s[c]) if c in s else "–" for c in cols]
            cells.append("**%.2f**" % s["ratio"] if "ratio" in s else "–")
            cells.append("%.2f" % s["ratio_ptll"] if "ratio_ptll" in s else "–")
            if row["pattern"].startswith(("touch", "populate")):
                cells.append("%d / %d" % (s["mount"]["minflt"], s["direct"]["minflt"]) if "mount" in s else "–")
            else:
                cells.append("")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("Cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before every run. Warm: before every run, "
                     "caches dropped, then that target alone filled by one sequential `read()` pass. The direct baseline reads the same bytes at "
                     "the same logical offsets from the shard files; passthrough_ll (libfuse 3.14 example, compiled "
                     "at run time, `-o cache=always`, kernel-default 128 KiB readahead, malloc tunables so it does "
                     "not hit libfuse's per-request allocation fallback) serves the shard directory.")
        lines.append("")
    fol = res.get("folios") or {}
    if fol:
        lines.append("| page-cache folios behind a warm mapping (filled by `read()`) | share of the bytes by folio size | faults for the whole file |")
        lines.append("|---|---|---|")
        for k, v in fol.items():
            fb = v["folio_bytes"]
            tot = float(sum(fb.values())) or 1.0
            big = sorted(fb.items(), key=lambda kv: -kv[1])[:4]
            lines.append("| %s | %s | %d |" % ({"direct": "direct (ext4 shards)", "mount": "gguf-mount (FUSE)"}.get(k, k),
                                              ", ".join("%s %.0f %%" % (sz, 100 * b / tot) for sz, b in big), v["minflt"]))
        lines.append("")
    if res["startup"]:
        lines.append("| mount-to-readable | shards | apparent data | merged header | cache | ms median (min–max) | daemon peak RSS |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in res["startup"]:
            h = [x for x in r["daemon_hwm"] if x]
            lines.append("| %s | %d | %.2f GiB | %.2f MiB | %s | %.1f (%.1f–%.1f) | %s |" % (
                r["label"], r["shards"], r["apparent_bytes"] / GIB, r["merged_header_bytes"] / MIB, r["state"],
                med(r["ms"]), min(r["ms"]), max(r["ms"]), ("%.1f MiB" % (max(h) / MIB)) if h else "?"))
        lines.append("")
        lines.append("From `gguf-mount -f SOURCE MNT` being started to the first byte of MNT/model.gguf read "
                     "(polled every 0.2 ms). Cold: caches dropped before each start.")
        lines.append("")
    pc = res.get("page_cache") or {}
    if pc:
        lines.append("| page cache after one full read through the mount (from cold) | GiB | × model |")
        lines.append("|---|---|---|")
        for k, label in (("merged_file_cached", "merged file (FUSE inode)"), ("shards_cached", "shard files"),
                         ("total_cached", "total (fincore)"), ("meminfo_cached_delta", "`Cached` delta in /proc/meminfo")):
            lines.append("| %s | %.2f | %.2f |" % (label, pc[k] / GIB, pc[k] / pc["model_bytes"]))
        lines.append("")
        lines.append("Warm re-read of the mounted file right after: %.2f GiB/s." % pc.get("warm_reread_gib_s", 0))
        lines.append("")
    rss = res.get("rss") or {}
    if rss:
        lines.append("Daemon memory (8-shard mount): peak RSS (VmHWM) %s after one full read, %s after the whole "
                     "matrix; RSS at the end %s." % (
                         mib(rss.get("after_full_read_hwm")), mib(rss.get("after_matrix_hwm")),
                         mib(rss.get("after_matrix_rss"))))
        lines.append("")
    if res["offline"]:
        lines.append("| offline (%.2f GiB, sources warm, output fsynced) | GiB/s median (min–max) | seconds | peak RSS | vs cp |" %
                     (env.get("model_bytes", 0) / GIB))
        lines.append("|---|---|---|---|---|")
        off = res["offline"]
        base = {"merge": "cp (shards, + fsync)", "split": "cp (model, + fsync)"}
        for k, rs in off.items():
            g = [r["gib_s"] for r in rs]
            ratio = ""
            if k in base:
                ratio = "**%.2f**" % (med(g) / med([r["gib_s"] for r in off[base[k]]]))
            lines.append("| %s | %.2f (%.2f–%.2f) | %.2f | %s | %s |" % (
                k, med(g), min(g), max(g), med([r["seconds"] for r in rs]), mib(max(r["max_rss"] for r in rs)), ratio))
        lines.append("")
    lines += llama_table(res.get("llama"))
    lines += views.views_table(res)
    lines += kv.kv_table(res)
    lines += large.large_table(res)
    lines += oci.oci_table(res)
    lines += targets_table(res)
    md = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, name + ".md"), "w") as f:
        f.write(md)
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    if res["rows"]:
        chart(res, os.path.join(outdir, name + ".png"))
    print(md)


def llama_table(ll):
    """The real-client rows (node-llama-cpp load + first token) as markdown lines."""
    if not ll:
        return []
    if "skipped" in ll:
        return ["node-llama-cpp load + first token: skipped (%s)." % ll["skipped"], ""]
    label = {"mount": "merged file through the gguf-mount mount", "disk": "merged file on disk (`gguf-mount merge`)",
             "shards": "llama.cpp given the first shard (opens the 4 shards itself)"}
    states = [s for s in ("cold", "warm") if s in ll["runs"]]
    out = ["| node-llama-cpp load + first token, %.2f GiB llama in %d shards | %s |" % (
        ll["model_bytes"] / GIB, ll["shards"], " | ".join(
            "%s: s median (min–max), `loadModel` part | %s: disk file / this (total, load)" % (s, s) for s in states)),
           "|---|" + "---|---|" * len(states)]
    for t in ("mount", "disk", "shards"):
        cells = [label[t]]
        for s in states:
            tot = [r["total_s"] for r in ll["runs"][s][t]]
            load = med([r["load_ms"] for r in ll["runs"][s][t]]) / 1000
            disk = med([r["total_s"] for r in ll["runs"][s]["disk"]])
            disk_load = med([r["load_ms"] for r in ll["runs"][s]["disk"]]) / 1000
            cells.append("%.2f (%.2f–%.2f), load %.2f" % (med(tot), min(tot), max(tot), load))
            cells.append("**%.2f**, %.2f" % (disk / med(tot), disk_load / load) if t != "disk" else "1, 1")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "From the model path given to an already started node-llama-cpp 3.22.1 (prebuilt llama.cpp, CPU, "
            "mmap on, 1 thread) to the first generated token of a [BOS] prompt; \"load\" is `loadModel` alone "
            "(llama.cpp maps the file with MAP_POPULATE, so it faults in every page: on a FUSE file in 4 KiB "
            "folios, see \"What limits these numbers\" in bench/README.md). Cold: caches dropped before each "
            "run (the mount stays up). Warm: caches dropped, then that target alone read once. Targets "
            "interleaved run by run.", ""]
    return out


def targets_table(res):
    """The issue's targets against this run's medians."""
    rows = {(r["pattern"], r["state"]): summarize_row(r) for r in res["rows"]}
    out = ["| target (issue 5) | this run | met |", "|---|---|---|"]

    def add(name, value, ok):
        out.append("| %s | %s | %s |" % (name, value, "yes" if ok else "**no**"))

    for pats, states, floor, label in (
            (["seq"], ["cold", "warm"], 0.95, "sequential read ≥ 0.95 × direct"),
            (["rand"], ["cold", "warm"], 0.90, "random 1 MiB preads ≥ 0.90 × direct"),
            (["conc"], ["cold", "warm"], 0.90, "8 concurrent readers ≥ 0.90 × direct"),
            (["touch", "populate"], ["cold", "warm"], 0.50, "mmap touch / populate ≥ 0.50 × direct")):
        for p in pats:
            for st in states:
                s = rows.get((p, st))
                if s and "ratio" in s:
                    add("%s (%s %s)" % (label, p, st), "%.2f" % s["ratio"], s["ratio"] >= floor)
    slower = ["%s %s (%.2f)" % (p, st, s["ratio_ptll"]) for (p, st), s in rows.items()
              if "ratio_ptll" in s and s["ratio_ptll"] < 1.0]
    if any("ratio_ptll" in s for s in rows.values()):
        add("every pattern at least as fast as passthrough_ll", "slower: " + ", ".join(slower) if slower else
            "all ≥ 1.0", not slower)
    big = [r for r in res["startup"] if r["set"].startswith("shards1200")]
    if big:
        worst = max(med(r["ms"]) for r in big)
        add("mount-to-readable < 100 ms, 1,200 shards, independent of data size",
            "medians " + ", ".join("%.0f ms (%s, %s)" % (med(r["ms"]), r["set"], r["state"]) for r in big), worst < 100)
    pc = res.get("page_cache") or {}
    if pc:
        add("page cache after a full read ≤ 1.1 × model", "%.2f × (fincore), %.2f × (meminfo)" % (
            pc["ratio_total"], pc["ratio_meminfo"]), pc["ratio_total"] <= 1.1)
    rss = (res.get("rss") or {}).get("after_matrix_hwm")
    hdr = next((r["merged_header_bytes"] for r in res["startup"] if r["set"] == "shards8"), 0)
    if rss:
        add("daemon RSS < 64 MiB + merged header (%.1f MiB)" % (hdr / MIB), mib(rss), rss < 64 * MIB + hdr)
    off = res.get("offline") or {}
    for op, base in (("merge", "cp (shards, + fsync)"), ("split", "cp (model, + fsync)")):
        if op in off and base in off:
            r = med([x["gib_s"] for x in off[op]]) / med([x["gib_s"] for x in off[base]])
            peak = max(x["max_rss"] for x in off[op])
            add("%s ≥ 0.9 × cp, peak RSS < 64 MiB" % op, "%.2f × cp, %s" % (r, mib(peak)), r >= 0.9 and peak < 64 * MIB)
    return out + [""] if len(out) > 2 else []


def mib(x):
    return "%.1f MiB" % (x / MIB) if x else "?"


def chart(res, png):
    if not shutil.which("gnuplot"):
        log("gnuplot missing: no chart")
        return
    targets = res.get("targets", [])
    dat = png[:-4] + ".dat"
    with open(dat, "w") as f:
        f.write("label " + " ".join(targets) + "\n")
        for row in res["rows"]:
            s = summarize_row(row)
            f.write('"%s %s" %s\n' % (row["pattern"], row["state"],
                                        " ".join("%.4f" % s[t]["median"] if t in s else "?" for t in targets)))
    title = "gguf-mount vs direct shard reads (median GiB/s, log scale) - kernel %s" % res["env"]["kernel"]
    plots = ", ".join("'%s' using %d:xtic(1) title '%s'" % (dat, i + 2, {"direct": "direct (shards)",
                      "mount": "gguf-mount", "ptll": "passthrough_ll"}.get(t, t)) for i, t in enumerate(targets))
    gp = "\n".join([
        "set terminal pngcairo size 1400,700 font 'sans,10' noenhanced",
        "set bmargin 9",
        "set rmargin 18",
        "set output '%s'" % png,
        "set title \"%s\"" % title,
        "set datafile missing '?'",
        "set style data histograms",
        "set style histogram clustered gap 1",
        "set style fill solid 0.85 border -1",
        "set logscale y",
        "set yrange [0.1:*]",
        "set ylabel 'GiB/s'",
        "set grid ytics",
        "set xtics rotate by -30",
        "set key top left",
        "plot " + plots,
    ])
    subprocess.run(["gnuplot"], input=gp, text=True, check=True)
    os.unlink(dat)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="512 MiB model, 3 runs, 1,024 random reads")
    ap.add_argument("--data", default=os.environ.get("GGUF_BENCH_DATA", os.path.join(REPO, "bench", "data")))
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--name", default=None, help="report base name (default: the kernel release, or 'quick')")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--patterns", default="seq,touch,populate,rand,conc")
    ap.add_argument("--touch-advice", default="hugepage,sequential,willneed,populate_read",
                    help="comma list of extra mmap-touch rows with that madvise advice before touching "
                         "(direct and gguf-mount only); empty for none")
    ap.add_argument("--skip-states", default="", help="e.g. 'warm' or 'cold'")
    ap.add_argument("--sections", default="matrix,startup,offline,llama,views,kv,oci",
                    help="llama: node-llama-cpp load + first token (needs node >= 20; tests/clients npm packages); "
                         "views: shard views (bench/views.py); kv: sidecar overrides (bench/kv.py); "
                         "large (not in the default): load modes of a >= 8 GiB model (bench/large.py; "
                         "17 GiB of disk); oci: OCI registry rows (bench/oci.py: docker-registry on "
                         "127.0.0.1, a 1.2 GiB model in 7 layers; writes bench/results/oci-DATE.*)")
    ap.add_argument("--oci-ref-gm", default=None, help="oci: another gguf-mount build measured in the same runs (A/B)")
    ap.add_argument("--oci-verbose", action="store_true", help="oci: daemons log at debug level (DATA/oci/run/daemon.log)")
    ap.add_argument("--large-rows", default="modes,folios,loaders,remote,memlimit",
                    help="rows of the large section (bench/large.py): modes (load modes, file vs mount), folios "
                         "(bench/trace-folios.sh), loaders (4 loaders at once), remote (time to first token from "
                         "http, hf and s3 sources, and s3rver, vs download-then-load), memlimit (the same under a memory cgroup "
                         "limit below the model)")
    ap.add_argument("--large-ref-gm", default=None,
                    help="large: another gguf-mount build (before) measured through its own mount in the same "
                         "runs as this one, for the modes and remote rows (a same-run before/after)")
    ap.add_argument("--large-sources", default="http,hf,s3,s3rver",
                    help="large: the sources of the remote row (http, hf, s3: nginx with SigV4 checked, s3rver: "
                         "the tests' S3 server; default all)")
    ap.add_argument("--variant", action="append", default=[],
                    help="extra gguf-mount target NAME|BINARY|ARGS|ENV (empty BINARY: the built one)")
    ap.add_argument("--no-ptll", action="store_true")
    ap.add_argument("--ptll-stock", action="store_true", help="run passthrough_ll without the malloc tunables")
    ap.add_argument("--render", metavar="JSON", help="only rewrite the .md and .png of a results .json")
    a = ap.parse_args()
    if a.render:
        with open(a.render) as f:
            res = json.load(f)
        write_reports(res, os.path.dirname(os.path.abspath(a.render)), os.path.basename(a.render)[:-5])
        return
    if a.runs is None:
        a.runs = 3 if a.quick else 5
    a.rand_count = 1024 if a.quick else 4096
    a.name_given = a.name is not None
    if a.name is None:
        a.name = "quick" if a.quick else platform.release()
    b = Bench(a)

    def on_signal(sig, _frame):
        log("signal %d: cleaning up" % sig)
        b.cleanup.all()
        sys.exit(128 + sig)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    try:
        b.main()
    finally:
        b.cleanup.all()


if __name__ == "__main__":
    main()
