#!/usr/bin/env python3
"""Remote read benchmark of gguf-mount (issue 11): a loopback nginx serves generated shard sets and
every row is a ratio measured in this run against a reference client of the same server.

  cold        cold sequential read of the remote merged model vs curl of the same shards
  cdn         the same behind nginx limit_rate per connection vs aria2c -x8 -s8
  remount     cached remount (blocks on disk, page cache dropped) vs a local mount of the shards
  open1200    mount-to-readable of a remote 1,200-shard set, bytes sent by nginx vs one block per shard
  rss         daemon RSS while reading a ~100 GiB sparse remote set (holes served as zeros)
  merge       `gguf-mount merge URL OUT` vs curl saving the same shards (+ sync), and the bytes each
              path writes to storage (/proc/PID/io write_bytes, and the block device's counter):
              merge URL against download-then-merge (curl, then `gguf-mount merge` of the shards)
  ttft        node-llama-cpp's time to first token on a remote random llama model (>= 1 GiB), cold:
              mount the URL vs merge URL vs curl + merge vs curl + llama.cpp loading the shards

Only 127.0.0.1 is ever contacted. Data is generated with bench_gen + gguf-mount split (never committed).
"""
import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time

import real_client as rc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = 4 << 20


def log(msg):
    print("remote-bench: " + msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Bench:
    def __init__(self, a):
        self.a = a
        self.data = os.path.abspath(a.data)
        self.gm = a.gm or os.path.join(a.build, "gguf-mount")
        self.ref_gm = a.ref_gm
        self.gen = os.path.join(a.build, "bench", "bench_gen")
        self.run_dir = os.path.join(self.data, "run")
        os.makedirs(self.run_dir, exist_ok=True)
        self.nginx = None
        self.results = {"load_start": os.getloadavg()}

    # ---- data --------------------------------------------------------------------------------
    def gen_data(self):
        q = self.a.quick
        spec = {"model": (512 << 20) if q else (2560 << 20), "shards": 8, "sparse_tensors": 200 if q else 1600,
                "sparse_tensor_bytes": 64 << 20, "v": 1}
        marker = os.path.join(self.data, "REMOTE_SPEC.json")
        if os.path.exists(marker) and open(marker).read() == json.dumps(spec, sort_keys=True):
            log("data: reusing " + self.data)
            return
        log("data: generating under " + self.data)
        for d in ("www", "tmp"):
            shutil.rmtree(os.path.join(self.data, d), ignore_errors=True)
        os.makedirs(os.path.join(self.data, "tmp"))
        for d in ("dense", "s1200", "sparse"):
            os.makedirs(os.path.join(self.data, "www", d))
        tmp = os.path.join(self.data, "tmp", "m.gguf")
        info = json.loads(run([self.gen, "dense", tmp, "--bytes", str(spec["model"]), "--vocab", "32000",
                               "--seed", "1"]).stdout)
        per = -(-info["tensors"] // spec["shards"])
        run([self.gm, "split", "-q", "--split-max-tensors", str(per), tmp, os.path.join(self.data, "www/dense/model")])
        os.unlink(tmp)
        run([self.gen, "sparse", tmp, "--tensors", "1200", "--tensor-bytes", "4096", "--vocab", "32000", "--seed", "2"])
        run([self.gm, "split", "-q", "--split-max-tensors", "1", tmp, os.path.join(self.data, "www/s1200/model")])
        os.unlink(tmp)
        run([self.gen, "sparse", tmp, "--tensors", str(spec["sparse_tensors"]), "--tensor-bytes",
             str(spec["sparse_tensor_bytes"]), "--vocab", "32000", "--seed", "3"])
        run([self.gm, "split", "-q", "--split-max-tensors", "16", tmp, os.path.join(self.data, "www/sparse/model")])
        os.unlink(tmp)
        with open(marker, "w") as f:
            f.write(json.dumps(spec, sort_keys=True))

    def shards(self, d):
        p = os.path.join(self.data, "www", d)
        return sorted(os.path.join(p, f) for f in os.listdir(p))

    def url(self, path, port=None):
        rel = os.path.relpath(path, os.path.join(self.data, "www"))
        return "http://127.0.0.1:%d/%s" % (port or self.port, rel)

    # ---- nginx -------------------------------------------------------------------------------
    def start_nginx(self):
        self.port, self.slow_port = free_port(), free_port()
        nd = os.path.join(self.run_dir, "nginx")
        shutil.rmtree(nd, ignore_errors=True)
        os.makedirs(nd)
        www = os.path.join(self.data, "www")
        conf = f"""daemon off; worker_processes 1; pid {nd}/nginx.pid; error_log {nd}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000;
  log_format bytes '$body_bytes_sent';
  client_body_temp_path {nd}; proxy_temp_path {nd}; fastcgi_temp_path {nd}; uwsgi_temp_path {nd}; scgi_temp_path {nd};
  server {{ listen 127.0.0.1:{self.port}; root {www}; access_log {nd}/bytes.log bytes; }}
  server {{ listen 127.0.0.1:{self.slow_port}; root {www}; limit_rate {self.a.rate_mb}m; }}
}}
"""
        with open(os.path.join(nd, "nginx.conf"), "w") as f:
            f.write(conf)
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.nginx = subprocess.Popen([nginx, "-c", nd + "/nginx.conf", "-p", nd + "/", "-e", nd + "/error.log"])
        with open(os.path.join(self.run_dir, "pids"), "a") as f:
            f.write("%d\n" % self.nginx.pid)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                socket.create_connection(("127.0.0.1", self.slow_port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start (see %s/error.log)" % nd)

    def sent_bytes(self):
        p = os.path.join(self.run_dir, "nginx", "bytes.log")
        if not os.path.exists(p):
            return 0
        return sum(int(x) for x in open(p).read().split() if x.isdigit())

    def reset_log(self):
        p = os.path.join(self.run_dir, "nginx", "bytes.log")
        open(p, "w").close()
        os.kill(self.nginx.pid, signal.SIGUSR1)  # reopen
        time.sleep(0.1)

    # ---- mounts ------------------------------------------------------------------------------
    def mount(self, source, cache, gm=None, wait_name=None, mnt=None):
        mnt = mnt or os.path.join(self.run_dir, "mnt")
        os.makedirs(mnt, exist_ok=True)
        with open(os.path.join(self.run_dir, "mounts"), "a") as f:
            f.write(mnt + "\n")
        cmd = [gm or self.gm, "-f", "--log-level", "warn", source, mnt]
        if cache:
            cmd += ["--cache-dir", cache]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd)
        with open(os.path.join(self.run_dir, "pids"), "a") as f:
            f.write("%d\n" % p.pid)
        path = os.path.join(mnt, wait_name or "model.gguf")
        while True:
            if p.poll() is not None:
                raise RuntimeError("gguf-mount exited with %d: %s" % (p.returncode, " ".join(cmd)))
            try:
                with open(path, "rb") as f:
                    if f.read(1):
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > 120:
                raise RuntimeError("mount not readable after 120 s")
            time.sleep(0.0005)
        return p, path, time.monotonic() - t0

    def umount(self, p, mnt=None):
        mnt = mnt or os.path.join(self.run_dir, "mnt")
        for _ in range(100):  # EBUSY while a lookup of another process is still in the mount
            if subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL).returncode == 0 or p.poll() is not None:
                break
            time.sleep(0.1)
        try:
            p.wait(timeout=600)  # the daemon commits (fdatasync + rename) every staged block first
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    @staticmethod
    def read_all(path):
        fd = os.open(path, os.O_RDONLY)
        n = 0
        t0 = time.monotonic()
        try:
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                n += len(b)
        finally:
            os.close(fd)
        return n, time.monotonic() - t0

    def fresh_cache(self):
        c = os.path.join(self.data, "tmp", "cache")
        shutil.rmtree(c, ignore_errors=True)
        return c

    def remote_cold(self, first_url, gm=None):
        """Bytes read, seconds from mount to the last byte read, seconds until the daemon has
        exited after the unmount (every fetched block committed durably to the cache)."""
        cache = self.fresh_cache()
        drop_caches()
        t0 = time.monotonic()
        p, path, _ = self.mount(first_url, cache, gm)
        try:
            n, _ = self.read_all(path)
            t_read = time.monotonic() - t0
        finally:
            self.umount(p)
        return n, t_read, time.monotonic() - t0

    def curl(self, urls):
        drop_caches()
        t0 = time.monotonic()
        run(["curl", "-sSf", "--noproxy", "*"] + sum((["-o", "/dev/null", u] for u in urls), []))
        return time.monotonic() - t0

    def curl_to_disk(self, urls):
        """curl saving the shards into the data directory's file system (the cache's disk):
        seconds until curl exits (what a user waits for before loading), and until a sync after
        it returns (the bytes durable)."""
        out = os.path.join(self.data, "tmp", "curl")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        drop_caches()
        t0 = time.monotonic()
        run(["curl", "-sSf", "--noproxy", "*"] + sum((["-o", os.path.join(out, "%d" % i), u] for i, u in enumerate(urls)), []))
        t_saved = time.monotonic() - t0
        os.sync()
        dt = time.monotonic() - t0
        shutil.rmtree(out, ignore_errors=True)
        return t_saved, dt

    def aria2(self, urls):
        out = os.path.join(self.data, "tmp", "aria2")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        lst = os.path.join(self.data, "tmp", "aria2.list")
        with open(lst, "w") as f:
            f.write("\n".join(urls) + "\n")
        drop_caches()
        t0 = time.monotonic()
        run(["aria2c", "-q", "-i", lst, "-d", out, "-j1", "-x8", "-s8", "-k1M", "--file-allocation=none",
             "--allow-overwrite=true", "--no-conf", "--all-proxy="])
        dt = time.monotonic() - t0
        shutil.rmtree(out, ignore_errors=True)
        return dt

    # ---- rows --------------------------------------------------------------------------------
    def row_cold(self):
        shards = self.shards("dense")
        urls = [self.url(s) for s in shards]
        total = sum(os.path.getsize(s) for s in shards)
        rows = {"curl_s": [], "curl_saved_s": [], "curl_disk_s": [], "gm_s": [], "gm_durable_s": []}
        if self.ref_gm:
            rows["ref_s"] = []
        for _ in range(self.a.runs):
            rows["curl_s"].append(self.curl(urls))
            saved, synced = self.curl_to_disk(urls)
            rows["curl_saved_s"].append(saved)
            rows["curl_disk_s"].append(synced)
            n, dt, durable = self.remote_cold(urls[0])
            rows["gm_s"].append(dt)
            rows["gm_durable_s"].append(durable)
            if self.ref_gm:
                rows["ref_s"].append(self.remote_cold(urls[0], self.ref_gm)[1])
        self.model_bytes = n
        med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
        r = {"shard_bytes": total, "merged_bytes": n, "runs": rows,
             "curl_MBps": total / med["curl_s"] / 1e6, "curl_saved_MBps": total / med["curl_saved_s"] / 1e6,
             "curl_disk_MBps": total / med["curl_disk_s"] / 1e6,
             "gm_MBps": n / med["gm_s"] / 1e6, "gm_durable_MBps": n / med["gm_durable_s"] / 1e6}
        r["ratio"] = r["gm_MBps"] / r["curl_MBps"]
        r["saved_ratio"] = r["gm_MBps"] / r["curl_saved_MBps"]
        r["disk_ratio"] = r["gm_durable_MBps"] / r["curl_disk_MBps"]
        if self.ref_gm:
            r["ref_MBps"] = n / med["ref_s"] / 1e6
            r["ref_ratio"] = r["ref_MBps"] / r["curl_MBps"]
        self.results["cold"] = r
        log("cold: %s" % json.dumps({k: v for k, v in r.items() if k != "runs"}))

    def row_cdn(self):
        shards = self.shards("dense")
        if self.a.quick:
            shards = shards[:2]
        urls = [self.url(s, self.slow_port) for s in shards]
        total = sum(os.path.getsize(s) for s in shards)
        aria = self.aria2(urls)
        # gguf-mount: read the same shards' bytes through the mount (--show-shards is not needed:
        # the merged file's first `total` bytes are mostly the same data; read exactly that many).
        cache = self.fresh_cache()
        drop_caches()
        t0 = time.monotonic()
        p, path, _ = self.mount(self.url(self.shards("dense")[0], self.slow_port), cache)
        try:
            fd = os.open(path, os.O_RDONLY)
            n = 0
            while n < total:
                b = os.read(fd, min(1 << 20, total - n))
                if not b:
                    break
                n += len(b)
            os.close(fd)
        finally:
            self.umount(p)
        dt = time.monotonic() - t0
        r = {"limit_rate_MBps": self.a.rate_mb * 1.048576, "bytes": total, "aria2_MBps": total / aria / 1e6,
             "gm_MBps": n / dt / 1e6}
        r["ratio"] = r["gm_MBps"] / r["aria2_MBps"]
        self.results["cdn"] = r
        log("cdn: %s" % json.dumps(r))

    def row_remount(self):
        shards = self.shards("dense")
        cache = self.fresh_cache()
        p, path, _ = self.mount(self.url(shards[0]), cache)
        self.read_all(path)
        self.umount(p)
        cached, local = [], []
        for _ in range(self.a.runs):
            drop_caches()
            t0 = time.monotonic()
            p, path, _ = self.mount(self.url(shards[0]), cache)
            self.reset_log()
            n, _ = self.read_all(path)
            self.umount(p)
            cached.append(time.monotonic() - t0)
            drop_caches()
            t0 = time.monotonic()
            p, path, _ = self.mount(shards[0], None)
            self.read_all(path)
            self.umount(p)
            local.append(time.monotonic() - t0)
        c, l = sorted(cached)[len(cached) // 2], sorted(local)[len(local) // 2]
        r = {"cached_MBps": n / c / 1e6, "local_MBps": n / l / 1e6, "ratio": l / c,
             "bytes_sent_while_reading": self.sent_bytes(), "runs": {"cached_s": cached, "local_s": local}}
        self.results["remount"] = r
        log("remount: %s" % json.dumps({k: v for k, v in r.items() if k != "runs"}))

    def row_open1200(self):
        shards = self.shards("s1200")
        bound = sum(min(os.path.getsize(s), BLOCK) for s in shards)
        times = []
        for i in range(self.a.runs):
            cache = self.fresh_cache()
            drop_caches()
            self.reset_log()
            p, path, dt = self.mount(self.url(shards[0]), cache)
            self.umount(p)
            times.append(dt)
            sent = self.sent_bytes()
        r = {"shards": len(shards), "mount_to_readable_s": sorted(times)[len(times) // 2], "runs": times,
             "bytes_sent": sent, "one_block_per_shard_bytes": bound, "ratio": sent / bound}
        self.results["open1200"] = r
        log("open1200: %s" % json.dumps({k: v for k, v in r.items() if k != "runs"}))

    def row_rss(self):
        shards = self.shards("sparse")
        apparent = sum(os.path.getsize(s) for s in shards)
        cache = self.fresh_cache()
        p, path, _ = self.mount(self.url(shards[0]), cache)
        try:
            size = os.path.getsize(path)
            fd = os.open(path, os.O_RDONLY)
            # 1 GiB sequential + one 1 MiB read in every 1 GiB of the file.
            n = 0
            while n < (1 << 30):
                b = os.pread(fd, 1 << 20, n)
                if not b:
                    break
                n += len(b)
            for off in range(0, size, 1 << 30):
                os.pread(fd, 1 << 20, off)
            os.close(fd)
            st = open("/proc/%d/status" % p.pid).read()
            kb = {l.split(":")[0]: int(l.split()[1]) for l in st.splitlines() if l.startswith(("VmRSS", "VmHWM"))}
        finally:
            self.umount(p)
        r = {"apparent_bytes": apparent, "merged_bytes": size, "shards": len(shards),
             "rss_MiB": kb["VmRSS"] / 1024, "hwm_MiB": kb["VmHWM"] / 1024}
        self.results["rss"] = r
        log("rss: %s" % json.dumps(r))

    def row_merge(self):
        shards = self.shards("dense")
        urls = [self.url(s) for s in shards]
        total = sum(os.path.getsize(s) for s in shards)
        out = os.path.join(self.data, "tmp", "merge")
        names = [os.path.basename(s) for s in shards]
        keys = ("url_s", "url_written", "url_dev", "curl_s", "curl_written", "curl_dev", "merge_s", "merge_written",
                "merge_dev", "curl_null_s")
        runs = {k: [] for k in keys}
        for _ in range(self.a.runs):
            runs["curl_null_s"].append(self.curl(urls))  # the transfer alone, nothing written
            # gguf-mount merge URL OUT: an empty block cache (read, never written by merge).
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            cache = self.fresh_cache()
            drop_caches()
            d0 = rc.device_written(out)
            dt, wb = rc.run_counting_writes([self.gm, "merge", "-q", "--cache-dir", cache, urls[0],
                                             os.path.join(out, "model.gguf")], stdout=subprocess.DEVNULL)
            os.sync()
            d1 = rc.device_written(out)
            merged = os.path.getsize(os.path.join(out, "model.gguf"))
            runs["url_s"].append(dt)
            runs["url_written"].append(wb)
            runs["url_dev"].append(d1 - d0 if d0 is not None else None)
            # Download then merge: curl saves the shards (+ sync of them), then the offline merge.
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            drop_caches()
            d0 = rc.device_written(out)
            args = sum((["-o", os.path.join(out, n), u] for n, u in zip(names, urls)), [])
            dt, wb = rc.run_counting_writes(["sh", "-c", 'curl -sSf --noproxy "*" "$@" && sync "%s"/*' % out, "curl"] + args)
            os.sync()
            d1 = rc.device_written(out)
            runs["curl_s"].append(dt)
            runs["curl_written"].append(wb)
            runs["curl_dev"].append(d1 - d0 if d0 is not None else None)
            dt, wb = rc.run_counting_writes([self.gm, "merge", "-q", os.path.join(out, names[0]),
                                             os.path.join(out, "model.gguf")], stdout=subprocess.DEVNULL)
            os.sync()
            d2 = rc.device_written(out)
            runs["merge_s"].append(dt)
            runs["merge_written"].append(wb)
            runs["merge_dev"].append(d2 - d1 if d0 is not None else None)
            shutil.rmtree(out, ignore_errors=True)
        med = {k: sorted(v)[len(v) // 2] if None not in v else None for k, v in runs.items()}
        r = {"shard_bytes": total, "merged_bytes": merged, "runs": runs, "median": med,
             "url_MBps": merged / med["url_s"] / 1e6, "curl_MBps": total / med["curl_s"] / 1e6,
             "dl_merge_s": med["curl_s"] + med["merge_s"]}
        r["ratio"] = med["curl_s"] / med["url_s"]
        r["curl_null_MBps"] = total / med["curl_null_s"] / 1e6
        r["ratio_null"] = med["curl_null_s"] / med["url_s"]
        r["ratio_dl_merge"] = r["dl_merge_s"] / med["url_s"]
        r["written_ratio"] = med["url_written"] / (med["curl_written"] + med["merge_written"])
        self.results["merge"] = r
        log("merge: %s" % json.dumps({k: v for k, v in r.items() if k != "runs"}))

    def row_ttft(self):
        why = rc.clients_ready(self.gm)
        if why:
            self.results["ttft"] = {"skipped": why}
            log("ttft: skipped: " + why)
            return
        nbytes = (64 << 20) if self.a.quick else (5 << 28)  # quick: one 86 MiB layer; full: 14 layers, 1.18 GiB
        model, first, info = rc.gen_llama(self.gen, self.gm, self.data, nbytes, 4)
        link = os.path.join(self.data, "www", "llama")
        if not os.path.islink(link):
            os.symlink(os.path.dirname(first), link)
        shards = sorted(os.path.join(link, f) for f in os.listdir(link))
        urls = [self.url(s) for s in shards]
        names = [os.path.basename(s) for s in shards]
        out = os.path.join(self.data, "tmp", "ttft")

        def fresh_out():
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)

        def curl_shards():
            fresh_out()
            run(["curl", "-sSf", "--noproxy", "*"] + sum((["-o", os.path.join(out, n), u] for n, u in zip(names, urls)), []))

        def merge_local():
            curl_shards()
            run([self.gm, "merge", "-q", os.path.join(out, names[0]), os.path.join(out, "llama.gguf")])
            return os.path.join(out, "llama.gguf")

        def merge_url():
            fresh_out()
            run([self.gm, "merge", "-q", "--cache-dir", self.fresh_cache(), urls[0], os.path.join(out, "llama.gguf")])
            return os.path.join(out, "llama.gguf")

        def shards_local():
            curl_shards()
            return os.path.join(out, names[0])

        mounted = []

        def mount_url():
            p, path, _ = self.mount(urls[0], self.fresh_cache(), wait_name="llama.gguf")
            mounted.append(p)
            return path

        def unmount():
            while mounted:
                self.umount(mounted.pop())

        paths = {"mount": (mount_url, unmount), "merge_url": (merge_url, None), "curl_merge": (merge_local, None),
                 "curl_shards": (shards_local, None)}
        runs = {k: [] for k in paths}
        for i in range(self.a.runs):
            order = list(paths)
            order = order[i % len(order):] + order[:i % len(order)]
            for k in order:
                prepare, cleanup = paths[k]
                self.fresh_cache()
                fresh_out()
                runs[k].append(rc.first_token(prepare, cleanup, drop_caches))
            log("ttft run %d: %s" % (i + 1, "  ".join("%s %.2f s" % (k, v[-1]["total_s"]) for k, v in runs.items())))
        shutil.rmtree(out, ignore_errors=True)
        med = {k: sorted(x["total_s"] for x in v)[len(v) // 2] for k, v in runs.items()}
        r = {"model_bytes": info["bytes"], "layers": info["layers"], "shards": len(shards), "runs": runs,
             "median_s": med, "tokens": sorted({x["token"] for v in runs.values() for x in v})}
        r["ratio"] = {k: med[k] / med["mount"] for k in med if k != "mount"}
        self.results["ttft"] = r
        log("ttft: %s" % json.dumps({k: v for k, v in r.items() if k != "runs"}))

    def row_fleet(self):
        """4 daemons (own caches) read the dense model at the same time through one nginx slice
        cache configured with docs/fleet/http.conf, against one daemon reading it from the origin."""
        import threading
        shards = self.shards("dense")
        first = self.url(shards[0])
        nodes = 4
        td = os.path.join(self.run_dir, "tier")
        shutil.rmtree(td, ignore_errors=True)
        os.makedirs(os.path.join(td, "cache"))
        tier_port = free_port()
        conf = open(os.path.join(REPO, "docs", "fleet", "http.conf")).read()
        for k, v in {"LISTEN": "127.0.0.1:%d" % tier_port, "ORIGIN": "http://127.0.0.1:%d" % self.port,
                     "CACHE_DIR": td + "/cache", "CACHE_SIZE": "100g"}.items():
            conf = conf.replace("@%s@" % k, v)
        with open(os.path.join(td, "fleet.conf"), "w") as f:
            f.write(conf)
        with open(os.path.join(td, "nginx.conf"), "w") as f:
            # as root, workers that write the cache and temp files as root too (the dirs are root's)
            f.write(("user root;\n" if os.geteuid() == 0 else "") + f"""daemon off; worker_processes 2; pid {td}/nginx.pid; error_log {td}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off; sendfile on; keepalive_requests 100000;
  client_body_temp_path {td}; proxy_temp_path {td}; fastcgi_temp_path {td}; uwsgi_temp_path {td}; scgi_temp_path {td};
  include {td}/fleet.conf;
}}
""")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        tier = subprocess.Popen([nginx, "-c", td + "/nginx.conf", "-p", td + "/", "-e", td + "/error.log"])
        with open(os.path.join(self.run_dir, "pids"), "a") as f:
            f.write("%d\n" % tier.pid)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", tier_port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            self.reset_log()
            n, direct_s, _ = self.remote_cold(first)
            direct_bytes = self.sent_bytes()
            self.reset_log()
            drop_caches()
            caches = [os.path.join(self.data, "tmp", "fleet-cache%d" % i) for i in range(nodes)]
            mnts = [os.path.join(self.run_dir, "fleet-mnt%d" % i) for i in range(nodes)]
            for c in caches:
                shutil.rmtree(c, ignore_errors=True)
            tier_first = first.replace("127.0.0.1:%d" % self.port, "127.0.0.1:%d" % tier_port)
            t0 = time.monotonic()
            daemons = [self.mount(tier_first, caches[i], mnt=mnts[i]) for i in range(nodes)]
            got = [0] * nodes
            def read(i):
                got[i] = self.read_all(daemons[i][1])[0]
            threads = [threading.Thread(target=read, args=(i,)) for i in range(nodes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            fleet_s = time.monotonic() - t0
            for i in range(nodes):
                self.umount(daemons[i][0], mnts[i])
            if any(g != n for g in got):
                raise RuntimeError("fleet: a node read %s bytes, not %d" % (got, n))
            origin = self.sent_bytes()
        finally:
            tier.terminate()
            tier.wait()
        r = {"nodes": nodes, "merged_bytes": n, "origin_bytes": origin, "origin_ratio": origin / n,
             "direct_bytes": direct_bytes, "direct_s": direct_s, "fleet_s": fleet_s, "time_ratio": fleet_s / direct_s}
        self.results["fleet"] = r
        log("fleet: %s" % json.dumps(r))

    # ---- report ------------------------------------------------------------------------------
    def report(self):
        name = self.a.name or ("remote-quick" if self.a.quick else "remote-" + platform.release())
        os.makedirs(self.a.out, exist_ok=True)
        with open(os.path.join(self.a.out, name + ".json"), "w") as f:
            json.dump(self.results, f, indent=1)
        R = self.results
        lines = ["# gguf-mount remote benchmark (%s, %s, %d runs, medians)" % (platform.release(),
                 "quick" if self.a.quick else "full", self.a.runs), "",
                 "| what | gguf-mount | reference | ratio |", "|---|---|---|---|"]
        if "cold" in R:
            c = R["cold"]
            lines.append("| cold sequential read, %.2f GiB in %d shards | %.0f MB/s | curl %.0f MB/s | %.2fx |" % (
                c["merged_bytes"] / 2**30, len(self.shards("dense")), c["gm_MBps"], c["curl_MBps"], c["ratio"]))
            lines.append("| same vs curl saving the shards to disk | %.0f MB/s | curl -o %.0f MB/s | %.2fx |" % (
                c["gm_MBps"], c["curl_saved_MBps"], c["saved_ratio"]))
            lines.append("| until durable: daemon exit after unmount vs curl -o + sync | %.0f MB/s | %.0f MB/s | %.2fx |" % (
                c["gm_durable_MBps"], c["curl_disk_MBps"], c["disk_ratio"]))
            if "ref_MBps" in c:
                lines.append("| same, --ref-gm build (%s) | %.0f MB/s | curl %.0f MB/s | %.2fx |" % (
                    os.path.basename(self.ref_gm), c["ref_MBps"], c["curl_MBps"], c["ref_ratio"]))
        if "cdn" in R:
            c = R["cdn"]
            lines.append("| limit_rate %d MiB/s per connection, %.2f GiB | %.0f MB/s | aria2c -x8 %.0f MB/s | %.2fx |" % (
                self.a.rate_mb, c["bytes"] / 2**30, c["gm_MBps"], c["aria2_MBps"], c["ratio"]))
        if "remount" in R:
            c = R["remount"]
            lines.append("| cached remount, cold page cache (%d bytes sent) | %.0f MB/s | local mount %.0f MB/s | %.2fx |" % (
                c["bytes_sent_while_reading"], c["cached_MBps"], c["local_MBps"], c["ratio"]))
        if "open1200" in R:
            c = R["open1200"]
            lines.append("| 1,200-shard set: mount-to-readable | %.2f s | target < 2 s | |" % c["mount_to_readable_s"])
            lines.append("| 1,200-shard set: bytes sent by nginx | %.1f MB | one block per shard %.1f MB | %.2fx |" % (
                c["bytes_sent"] / 1e6, c["one_block_per_shard_bytes"] / 1e6, c["ratio"]))
        if "rss" in R:
            c = R["rss"]
            lines.append("| daemon RSS, %.0f GiB sparse set in %d shards | %.0f MiB (peak %.0f) | | |" % (
                c["merged_bytes"] / 2**30, c["shards"], c["rss_MiB"], c["hwm_MiB"]))
        if "merge" in R:
            c, m = R["merge"], R["merge"]["median"]
            lines.append("| `merge URL OUT`, %.2f GiB in %d shards (output fsynced) | %.0f MB/s | curl -o + sync %.0f MB/s | %.2fx |" % (
                c["merged_bytes"] / 2**30, len(self.shards("dense")), c["url_MBps"], c["curl_MBps"], c["ratio"]))
            lines.append("| same vs curl to /dev/null (the transfer alone) | %.0f MB/s | curl %.0f MB/s | %.2fx |" % (
                c["url_MBps"], c["curl_null_MBps"], c["ratio_null"]))
            lines.append("| same vs download-then-merge (curl + sync, then `merge`) | %.1f s | %.1f s | %.2fx |" % (
                m["url_s"], c["dl_merge_s"], c["ratio_dl_merge"]))
            dev = ""
            if m["url_dev"] is not None:
                dev = " (block device: %.2f GiB vs %.2f GiB)" % (m["url_dev"] / 2**30, (m["curl_dev"] + m["merge_dev"]) / 2**30)
            lines.append("| bytes written: merge URL vs download-then-merge%s | %.2f GiB | %.2f GiB (shards %.2f + merged %.2f) | %.2fx |" % (
                dev, m["url_written"] / 2**30, (m["curl_written"] + m["merge_written"]) / 2**30,
                m["curl_written"] / 2**30, m["merge_written"] / 2**30, c["written_ratio"]))
        if "ttft" in R:
            c = R["ttft"]
            if "skipped" in c:
                lines.append("| node-llama-cpp time to first token | skipped: %s | | |" % c["skipped"])
            else:
                label = {"merge_url": "`merge URL` then load", "curl_merge": "curl + `merge` then load",
                         "curl_shards": "curl, llama.cpp loads the shards"}
                for k, v in c["ratio"].items():
                    lines.append("| time to first token, %.2f GiB llama in %d shards, cold: mount URL vs %s | %.1f s | %.1f s | %.2fx |" % (
                        c["model_bytes"] / 2**30, c["shards"], label[k], c["median_s"]["mount"], c["median_s"][k], v))
        if "fleet" in R:
            c = R["fleet"]
            lines.append("| fleet: %d nodes through one nginx slice cache (docs/fleet/http.conf), %.2f GiB: origin bytes / model | %.2fx | 1 node direct %.2fx | |" % (
                c["nodes"], c["merged_bytes"] / 2**30, c["origin_ratio"], c["direct_bytes"] / c["merged_bytes"]))
            lines.append("| fleet: time until all %d nodes read it, cold, vs 1 node direct | %.1f s | %.1f s | %.2fx |" % (
                c["nodes"], c["fleet_s"], c["direct_s"], c["time_ratio"]))
        lines += ["", "Cold: page cache dropped before every run, block cache emptied. The gguf-mount time runs from "
                  "the mount to the last byte read (what a loading client waits for); 'until durable' runs on until "
                  "the daemon has exited after the unmount, every block committed (fdatasync + rename) to the cache "
                  "on the data's file system. curl downloads the shards one after the other on one connection, to "
                  "/dev/null, to files (until curl exits) and to files + sync.",
                  "merge: bytes written = write_bytes of /proc/PID/io (pages dirtied by the process and its "
                  "children; the block device's counter, which also counts other processes, in parentheses). "
                  "Time to first token: from the start of mount/download (node-llama-cpp already started, caches "
                  "dropped, block cache empty) to the first token of a [BOS] prompt, 1 thread; downloaded shards "
                  "are in the page cache when loaded, as after any download.",
                  "Load average (1, 5, 15 min) at the start: %s; at the end: %s." % (
                      " ".join("%.2f" % x for x in R["load_start"]), " ".join("%.2f" % x for x in os.getloadavg())),
                  "Only 127.0.0.1 was contacted. `bench/run.sh --remote` (or bench/remote.sh) reproduces it."]
        with open(os.path.join(self.a.out, name + ".md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="512 MiB model, 1 run, 12 GiB sparse set (< 60 s)")
    ap.add_argument("--data", default=os.path.join(REPO, "bench", "data", "remote"))
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--gm", default=None, help="gguf-mount binary (default BUILD/gguf-mount)")
    ap.add_argument("--ref-gm", default=None, help="a second gguf-mount binary for an A/B of the cold row")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--name", default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--rate-mb", type=int, default=50, help="nginx limit_rate per connection, MiB/s")
    ap.add_argument("--rows", default="cold,cdn,remount,open1200,rss,merge,ttft,fleet")
    a = ap.parse_args()
    if a.runs is None:
        a.runs = 1 if a.quick else 3
    if a.quick and a.data == os.path.join(REPO, "bench", "data", "remote"):
        a.data = os.path.join(a.data, "quick")
    b = Bench(a)
    b.gen_data()
    b.start_nginx()
    try:
        for row in a.rows.split(","):
            getattr(b, "row_" + row)()
    finally:
        b.nginx.terminate()
        b.nginx.wait()
        b.report()


if __name__ == "__main__":
    main()
