#!/usr/bin/env python3
"""OCI registry rows of the benchmark (bench.py --sections oci, or this file alone), issue 31:
a model kept in a registry as a Docker model artifact (one layer per shard), read in place.

The registry is Debian's docker-registry (the distribution project's registry 2.8) on 127.0.0.1
with filesystem storage under DATA/oci/registry, as the tests start it (tests/remote/oci_registry.cpp);
the model is pushed through its HTTP API by the tests' tests/remote/oci/oci_push.py (monolithic blob
uploads + manifest PUT, `--flavour docker`: application/vnd.docker.ai.gguf.v3 layers in shard
order). A second registry process serves the same storage with token auth ("auth.token", the
tests' tests/remote/oci/token_server.py issuing RS256 JWTs; anonymous pull tokens).

The model: bench_gen dense (a 150,000-token vocabulary, random tensor bytes) split into 7 shards
by `gguf-mount split`: 1.2 GiB (--quick: 192 MiB). Rows, in one run, targets interleaved run by run:

- cold: `gguf-mount oci://REGISTRY/bench/dense MNT --plain-http` (fresh --cache-dir, page cache
  dropped): from exec of gguf-mount to the SHA-256 of the merged dense.gguf computed (1 MiB reads,
  OpenSSL through hashlib), against `curl -o` of the 7 blobs (/v2/bench/dense/blobs/DIGEST, one
  connection, page cache dropped) followed by the SHA-256 of the 7 files (the same function).
  Target >= 1.0x. Both digests are checked (the merged file's against `gguf-mount merge` of the
  shards, the blobs' against their digests).
- open7: mount-to-readable of the same 7-layer model through the token-auth registry: from exec of
  gguf-mount to the merged file's first byte read (polled every 0.5 ms), cold (fresh --cache-dir,
  page cache dropped): the token, the manifest and the 7 layers' headers. Target < 1 s.
- remount: cached remount (blocks already in --cache-dir, registry still up, page cache dropped)
  against a local mount of the same shards from disk, each from exec to the merged file's SHA-256.
  Target >= 0.9x.

Writes bench/results/oci-YYYY-MM-DD.{md,json} (--quick: quick-oci-YYYY-MM-DD), with the machine
and the load average. Only 127.0.0.1 is contacted. Data is generated once under DATA/oci (never
committed) and reused while its parameters do not change.
"""

import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

from remote import free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OCI_TESTS = os.path.join(REPO, "tests", "remote", "oci")
REPO_NAME = "bench/dense"  # the merged file is named after its last component: dense.gguf
MERGED = "dense.gguf"
SHARDS = 7
MANIFEST_ACCEPT = "application/vnd.oci.image.manifest.v1+json"
TARGETS = {"cold": ">= 1.0x", "open7": "< 1 s", "remount": ">= 0.9x"}


def sha256_file(path):
    """SHA-256 hex of a file, read in 1 MiB preads into one buffer (OpenSSL through hashlib)."""
    h = hashlib.sha256()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def wait_port(port, proc, what, log_path, timeout=30):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on 127.0.0.1:%d: %s" % (what, port, open(log_path).read()[-2000:]))


class Oci:
    """The rows above, with bench.Bench `b` (its gguf-mount and bench_gen, data directory, run
    count, quick flag, cleanup list and cache dropping)."""

    def __init__(self, b, log):
        self.b, self.log = b, log
        self.quick = b.a.quick
        self.runs = max(3, b.a.runs)
        self.dir = os.path.join(b.data, "oci")
        self.run_dir = os.path.join(self.dir, "run")
        self.tmp = os.path.join(self.dir, "tmp")
        self.mnt = os.path.join(self.dir, "mnt")
        for d in (self.run_dir, self.tmp, self.mnt):
            os.makedirs(d, exist_ok=True)
        self.verbose = getattr(b.a, "oci_verbose", False)
        self.ref_gm = getattr(b.a, "oci_ref_gm", None)  # another build measured in the same runs (A/B)
        self.procs = []
        self.env = self.isolated_env()

    def isolated_env(self):
        """The daemon's environment: no credential file of this machine is read (anonymous tokens)."""
        env = dict(os.environ)
        for k in ("DOCKER_CONFIG", "REGISTRY_AUTH_FILE"):
            env.pop(k, None)
        env["HOME"] = os.path.join(self.run_dir, "home")
        env["XDG_RUNTIME_DIR"] = os.path.join(self.run_dir, "xdg")
        os.makedirs(env["HOME"], exist_ok=True)
        os.makedirs(env["XDG_RUNTIME_DIR"], exist_ok=True)
        return env

    # ---- data --------------------------------------------------------------------------------
    def gen(self):
        nbytes = (192 << 20) if self.quick else (1200 << 20)
        spec = json.dumps({"bytes": nbytes, "shards": SHARDS, "vocab": 150000, "v": 1}, sort_keys=True)
        marker = os.path.join(self.dir, "OCI_SPEC.json")
        self.shard_dir = os.path.join(self.dir, "shards")
        if os.path.exists(marker):
            m = json.load(open(marker))
            if m.get("spec") == spec:
                self.want_merged = m["merged_sha256"]
                self.merged_bytes = m["merged_bytes"]
                self.shards = sorted(os.path.join(self.shard_dir, f) for f in os.listdir(self.shard_dir))
                self.log("oci: reusing " + self.dir)
                return
        self.log("oci: generating a %d MiB model in %d shards under %s" % (nbytes >> 20, SHARDS, self.dir))
        for d in (self.shard_dir, os.path.join(self.dir, "registry")):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(self.shard_dir)
        tmp = os.path.join(self.tmp, "m.gguf")
        info = json.loads(subprocess.run([self.b.gen, "dense", tmp, "--bytes", str(nbytes), "--vocab", "150000",
                                          "--seed", "31"], check=True, stdout=subprocess.PIPE, text=True).stdout)
        per = -(-info["tensors"] // SHARDS)
        subprocess.run([self.b.gm, "split", "-q", "--split-max-tensors", str(per), tmp,
                        os.path.join(self.shard_dir, "model")], check=True)
        os.unlink(tmp)
        self.shards = sorted(os.path.join(self.shard_dir, f) for f in os.listdir(self.shard_dir))
        if len(self.shards) != SHARDS:
            raise RuntimeError("split made %d shards, not %d" % (len(self.shards), SHARDS))
        merged = os.path.join(self.tmp, "merged.gguf")
        subprocess.run([self.b.gm, "merge", "-q", self.shards[0], merged], check=True)
        self.want_merged = sha256_file(merged)
        self.merged_bytes = os.path.getsize(merged)
        os.unlink(merged)
        with open(marker, "w") as f:
            json.dump({"spec": spec, "merged_sha256": self.want_merged, "merged_bytes": self.merged_bytes}, f)

    # ---- servers -----------------------------------------------------------------------------
    def spawn(self, name, argv):
        logf = open(os.path.join(self.run_dir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.procs.append(p)
        self.b.cleanup.pids.append(p.pid)
        self.b.cleanup._write()
        return p

    def start_registry(self, name, realm=None, cert=None):
        """docker-registry serving DATA/oci/registry/storage on a free 127.0.0.1 port (as
        tests/remote/oci_registry.cpp configures it); with `realm`, token auth."""
        port = free_port()
        storage = os.path.join(self.dir, "registry", "storage")
        os.makedirs(storage, exist_ok=True)
        conf = ("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n"
                "    rootdirectory: %s\n  delete:\n    enabled: true\n  maintenance:\n    uploadpurging:\n"
                "      enabled: false\nhttp:\n  addr: 127.0.0.1:%d\n" % (storage, port))
        if realm:
            conf += ("auth:\n  token:\n    realm: %s\n    service: gguf-test\n    issuer: gguf-test-issuer\n"
                     "    rootcertbundle: %s\n" % (realm, cert))
        path = os.path.join(self.run_dir, name + ".yml")
        with open(path, "w") as f:
            f.write(conf)
        p = self.spawn(name, [shutil.which("docker-registry") or "/usr/bin/docker-registry", "serve", path])
        wait_port(port, p, "docker-registry", os.path.join(self.run_dir, name + ".log"))
        return "127.0.0.1:%d" % port

    def start_tokens(self):
        d = os.path.join(self.run_dir, "tokens")
        os.makedirs(d, exist_ok=True)
        port_file = os.path.join(d, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        p = self.spawn("tokens", [sys.executable, os.path.join(OCI_TESTS, "token_server.py"), "--dir", d,
                                  "--port-file", port_file])
        t0 = time.monotonic()
        while not os.path.exists(port_file):
            if p.poll() is not None or time.monotonic() - t0 > 30:
                raise RuntimeError("token_server.py did not start: " + open(os.path.join(self.run_dir, "tokens.log")).read())
            time.sleep(0.05)
        return "http://127.0.0.1:%s/token" % open(port_file).read().strip(), os.path.join(d, "token.crt")

    def manifest(self):
        req = urllib.request.Request("http://%s/v2/%s/manifests/latest" % (self.open_host, REPO_NAME),
                                     headers={"Accept": MANIFEST_ACCEPT})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def push(self):
        """Pushes the shards once (the registry's storage stays under DATA/oci/registry)."""
        m = self.manifest()
        sizes = [os.path.getsize(s) for s in self.shards]
        if not m or [l["size"] for l in m.get("layers", [])] != sizes:
            self.log("oci: pushing %d layers (%.2f GiB) to %s/%s" % (len(self.shards), sum(sizes) / 2**30,
                                                                    self.open_host, REPO_NAME))
            t0 = time.monotonic()
            subprocess.run([sys.executable, os.path.join(OCI_TESTS, "oci_push.py"), "--registry", self.open_host,
                            "--flavour", "docker", "--repo", REPO_NAME, "--tag", "latest"] + self.shards,
                           check=True, stdout=subprocess.DEVNULL)
            self.log("oci: pushed in %.1f s" % (time.monotonic() - t0))
            m = self.manifest()
        self.digests = [l["digest"] for l in m["layers"]]

    def start(self):
        self.open_host = self.start_registry("registry")
        self.push()
        realm, cert = self.start_tokens()
        self.token_host = self.start_registry("registry-token", realm, cert)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if p.pid in self.b.cleanup.pids:
                self.b.cleanup.pids.remove(p.pid)
        self.b.cleanup._write()
        self.procs = []

    # ---- mounts ------------------------------------------------------------------------------
    def mount(self, source, extra, name, gm=None):
        """Starts gguf-mount -f SOURCE MNT EXTRA (`gm`: another build); returns (process, merged
        path, seconds from exec to the first byte of NAME read)."""
        cmd = [gm or self.b.gm, "-f", "--log-level", "debug" if self.verbose else "warn", source, self.mnt] + extra
        logf = open(os.path.join(self.run_dir, "daemon.log"), "a")
        logf.write("## %s %s\n" % (time.strftime("%H:%M:%S"), " ".join(cmd)))
        logf.flush()
        path = os.path.join(self.mnt, name)
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=self.env)
        logf.close()
        self.b.cleanup.add(self.mnt, p.pid)
        while True:
            try:
                with open(path, "rb", buffering=0) as f:
                    if f.read(1):
                        break
            except OSError:
                pass
            if p.poll() is not None:
                raise RuntimeError("gguf-mount exited with %d: %s (see %s/daemon.log)" % (p.returncode, " ".join(cmd),
                                                                                        self.run_dir))
            if time.monotonic() - t0 > 120:
                raise RuntimeError("%s not readable after 120 s" % path)
            time.sleep(0.0005)
        return p, path, time.monotonic() - t0

    def umount(self, p):
        """Unmounts and waits for the daemon's exit (it commits every staged block first)."""
        for _ in range(100):  # EBUSY while a lookup of another process is still in the mount
            if subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL).returncode == 0 or \
                    p.poll() is not None:
                break
            time.sleep(0.1)
        # Reaped here with its resource usage (the daemon's CPU seconds, user + system).
        t0 = time.monotonic()
        self.last_cpu = None
        while p.returncode is None:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                self.last_cpu = ru.ru_utime + ru.ru_stime
                break
            if time.monotonic() - t0 > 600:
                p.kill()
            time.sleep(0.02)
        if p.pid in self.b.cleanup.pids:
            self.b.cleanup.pids.remove(p.pid)
        if self.mnt in self.b.cleanup.mounts:
            self.b.cleanup.mounts.remove(self.mnt)
        self.b.cleanup._write()

    def fresh_cache(self):
        c = os.path.join(self.tmp, "cache")
        shutil.rmtree(c, ignore_errors=True)
        return c

    def oci_args(self, cache):
        return ["--plain-http", "--cache-dir", cache]

    def ref(self, host):
        return "oci://%s/%s:latest" % (host, REPO_NAME)

    def mount_and_hash(self, source, extra, name, gm=None):
        """Exec of gguf-mount to the merged file's SHA-256 (checked): (seconds, seconds to
        readable, seconds from the end of the read to the daemon's exit after the unmount)."""
        t0 = time.monotonic()
        p, path, readable = self.mount(source, extra, name, gm)
        try:
            c0 = time.process_time()
            digest = sha256_file(path)
            dt = time.monotonic() - t0
            self.reader_cpu = time.process_time() - c0
        finally:
            t1 = time.monotonic()
            self.umount(p)
        if digest != self.want_merged:
            raise RuntimeError("%s through %s: sha256 %s, not %s" % (name, source, digest, self.want_merged))
        self.cpu = {"daemon_s": self.last_cpu, "reader_s": self.reader_cpu}
        return dt, readable, time.monotonic() - t1

    def origin_files(self):
        """What the registry reads to answer (bench.py drop_caches keeps it cached: a remote
        registry's disk is not this machine's)."""
        return [os.path.join(self.dir, "registry", "storage")]

    # ---- rows --------------------------------------------------------------------------------
    def curl_and_hash(self):
        """curl -o of the 7 blobs (one connection), then the SHA-256 of each file: seconds, and the
        seconds of the download alone."""
        out = os.path.join(self.tmp, "curl")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        urls = ["http://%s/v2/%s/blobs/%s" % (self.open_host, REPO_NAME, d) for d in self.digests]
        files = [os.path.join(out, "%d" % i) for i in range(len(urls))]
        self.b.drop_caches(self.origin_files())
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(["curl", "-sSfL", "--noproxy", "*"] + sum((["-o", f, u] for f, u in zip(files, urls)), []),
                       check=True)
        t_dl = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0 = time.process_time()
        got = ["sha256:" + sha256_file(f) for f in files]
        dt = time.monotonic() - t0
        self.cpu = {"curl_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                    "reader_s": time.process_time() - c0}
        shutil.rmtree(out, ignore_errors=True)
        if got != self.digests:
            raise RuntimeError("curl: blob digests %s, not %s" % (got, self.digests))
        return dt, t_dl

    def row_cold(self):
        runs = {"gm_s": [], "gm_readable_s": [], "gm_exit_s": [], "curl_s": [], "curl_download_s": []}
        targets = ["gm", "curl"] + (["ref"] if self.ref_gm else [])
        for k in targets[2:]:
            runs.update({k + "_s": [], k + "_readable_s": [], k + "_exit_s": []})
        for i in range(self.runs):
            order = targets[i % len(targets):] + targets[:i % len(targets)]
            for k in order:
                if k == "curl":
                    dt, dl = self.curl_and_hash()
                    runs["curl_s"].append(dt)
                    runs["curl_download_s"].append(dl)
                    runs.setdefault("curl_cpu", []).append(self.cpu)
                else:
                    cache = self.fresh_cache()
                    self.b.drop_caches(self.origin_files())
                    dt, readable, exit_s = self.mount_and_hash(self.ref(self.open_host), self.oci_args(cache), MERGED,
                                                               self.ref_gm if k == "ref" else None)
                    runs[k + "_s"].append(dt)
                    runs[k + "_readable_s"].append(readable)
                    runs[k + "_exit_s"].append(exit_s)
                    runs.setdefault(k + "_cpu", []).append(self.cpu)
            self.log("oci cold run %d/%d: gguf-mount %.2f s, curl + sha256 %.2f s (download %.2f s)" % (
                i + 1, self.runs, runs["gm_s"][-1], runs["curl_s"][-1], runs["curl_download_s"][-1]))
        med = {k: statistics.median(v) for k, v in runs.items() if not k.endswith("_cpu")}
        med.update(median_cpu(runs))
        blob_bytes = sum(os.path.getsize(s) for s in self.shards)
        r = {"runs": runs, "median": med, "blob_bytes": blob_bytes, "merged_bytes": self.merged_bytes,
             "gm_MBps": self.merged_bytes / med["gm_s"] / 1e6, "curl_MBps": blob_bytes / med["curl_s"] / 1e6}
        r["ratio"] = r["gm_MBps"] / r["curl_MBps"]
        r["pass"] = r["ratio"] >= 1.0
        if self.ref_gm:
            r["ref_ratio"] = self.merged_bytes / med["ref_s"] / 1e6 / r["curl_MBps"]
        return r

    def row_open7(self):
        times, ref_times = [], []
        for i in range(self.runs):
            builds = [(None, times)] + ([(self.ref_gm, ref_times)] if self.ref_gm else [])
            for gm, out in (builds if i % 2 == 0 else builds[::-1]):
                cache = self.fresh_cache()
                self.b.drop_caches(self.origin_files())
                p, _, dt = self.mount(self.ref(self.token_host), self.oci_args(cache), MERGED, gm)
                self.umount(p)
                out.append(dt)
            self.log("oci open7 run %d/%d: %.3f s%s" % (i + 1, self.runs, times[-1], " (ref %.3f s)" % ref_times[-1]
                                                          if ref_times else ""))
        tokens = [json.loads(l) for l in open(os.path.join(self.run_dir, "tokens", "token.log")) if l.strip()]
        med = statistics.median(times)
        r = {"runs": times, "median_s": med, "layers": len(self.digests), "token_requests": len(tokens),
             "anonymous": all(not t.get("credentials") for t in tokens), "pass": med < 1.0}
        if ref_times:
            r["ref_runs"] = ref_times
            r["ref_median_s"] = statistics.median(ref_times)
        return r

    def row_remount(self):
        cache = os.path.join(self.tmp, "remount-cache")
        shutil.rmtree(cache, ignore_errors=True)
        self.b.drop_caches(self.origin_files())
        fill_s, _, fill_exit = self.mount_and_hash(self.ref(self.open_host), self.oci_args(cache), MERGED)
        runs = {"cached_s": [], "local_s": [], "cached_readable_s": [], "local_readable_s": []}
        targets = ["cached", "local"] + (["ref"] if self.ref_gm else [])
        if self.ref_gm:
            runs.update({"ref_s": [], "ref_readable_s": []})
        for i in range(self.runs):
            order = targets[i % len(targets):] + targets[:i % len(targets)]
            for k in order:
                self.b.drop_caches(self.origin_files())
                if k in ("cached", "ref"):
                    dt, readable, _ = self.mount_and_hash(self.ref(self.open_host), self.oci_args(cache), MERGED,
                                                          self.ref_gm if k == "ref" else None)
                else:
                    dt, readable, _ = self.mount_and_hash(self.shard_dir, [], "model.gguf")
                runs[k + "_s"].append(dt)
                runs[k + "_readable_s"].append(readable)
                runs.setdefault(k + "_cpu", []).append(self.cpu)
            self.log("oci remount run %d/%d: cached %.2f s, local %.2f s" % (i + 1, self.runs, runs["cached_s"][-1],
                                                                            runs["local_s"][-1]))
        shutil.rmtree(cache, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in runs.items() if not k.endswith("_cpu")}
        med.update(median_cpu(runs))
        r = {"runs": runs, "median": med, "fill_s": fill_s, "fill_exit_s": fill_exit,
             "merged_bytes": self.merged_bytes, "cached_MBps": self.merged_bytes / med["cached_s"] / 1e6,
             "local_MBps": self.merged_bytes / med["local_s"] / 1e6}
        r["ratio"] = med["local_s"] / med["cached_s"]
        r["pass"] = r["ratio"] >= 0.9
        if self.ref_gm:
            r["ref_ratio"] = med["local_s"] / med["ref_s"]
        return r


def median_cpu(runs):
    """{"TARGET_cpu": {"daemon_s"|"curl_s"|"reader_s": median CPU seconds}} of runs' *_cpu lists."""
    out = {}
    for k, v in runs.items():
        if k.endswith("_cpu") and v:
            out[k] = {n: statistics.median(x[n] for x in v if x.get(n) is not None) for n in v[0] if
                      any(x.get(n) is not None for x in v)}
    return out


def environment(b):
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    try:
        reg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "docker-registry"], stdout=subprocess.PIPE,
                             text=True).stdout.strip()
    except OSError:
        reg = "?"
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "kernel": platform.release(), "cpus": os.cpu_count(), "cpu": cpu, "docker_registry": reg,
            "quick": b.a.quick, "can_drop_caches": b.can_drop}


def run_oci(b, log, rows=("cold", "open7", "remount")):
    """Measures the rows above with bench.Bench `b`; stores them in b.results["oci"] and writes
    bench/results/oci-DATE.{md,json} (quick-oci-DATE with --quick)."""
    res = {"env": environment(b), "load_start": list(os.getloadavg()), "targets": TARGETS}
    b.results["oci"] = res
    if not shutil.which("docker-registry") and not os.path.exists("/usr/bin/docker-registry"):
        res["skipped"] = "docker-registry not installed (apt-get install docker-registry)"
        log("oci: skipped: " + res["skipped"])
        return res
    o = Oci(b, log)
    try:
        o.gen()
        o.start()
        res["model"] = {"merged_bytes": o.merged_bytes, "shards": len(o.shards), "layers": len(o.digests),
                        "blob_bytes": sum(os.path.getsize(s) for s in o.shards), "runs": o.runs}
        for row in rows:
            res[row] = getattr(o, "row_" + row)()
            log("oci %s: %s" % (row, json.dumps({k: v for k, v in res[row].items() if k != "runs"})))
    finally:
        o.stop()
        res["load_end"] = list(os.getloadavg())
        write_report(res, b.a.out if hasattr(b.a, "out") else os.path.join(REPO, "bench", "results"))
    return res


def cpu_text(med, key, parts):
    """'CPU a + b s' of the median CPU seconds `parts` of target `key` (runs' *_cpu), or ''."""
    c = med.get(key + "_cpu") or {}
    got = [c[p] for p in parts if p in c]
    return "; CPU %s s" % " + ".join("%.2f" % x for x in got) if got else ""


def oci_table(res):
    """The rows as markdown lines ([] when the section did not run)."""
    o = res.get("oci")
    if not o:
        return []
    if "skipped" in o:
        return ["OCI registry rows: skipped: " + o["skipped"], ""]
    m = o.get("model", {})
    yes = lambda ok: "**pass**" if ok else "**FAIL**"
    lines = ["| OCI registry row (%.2f GiB, %d layers, median of %d) | gguf-mount | reference | ratio | target | |" % (
        m.get("merged_bytes", 0) / 2**30, m.get("layers", 0), m.get("runs", 0)), "|---|---|---|---|---|---|"]
    if "cold" in o:
        c, med = o["cold"], o["cold"]["median"]
        lines.append("| cold read + sha256, `oci://` (fresh cache, page cache dropped) | %.2f s, %.0f MB/s%s | "
                     "`curl -o` of the blobs + sha256 %.2f s, %.0f MB/s (download alone %.2f s%s) | %.2fx | %s | %s |" % (
                         med["gm_s"], c["gm_MBps"], cpu_text(med, "gm", ("daemon_s", "reader_s")), med["curl_s"],
                         c["curl_MBps"], med["curl_download_s"], cpu_text(med, "curl", ("curl_s", "reader_s")),
                         c["ratio"], TARGETS["cold"], yes(c["pass"])))
        if "ref_ratio" in c:
            lines.append("| same, the build before (`--oci-ref-gm`) | %.2f s%s | | %.2fx | | |" % (
                med["ref_s"], cpu_text(med, "ref", ("daemon_s", "reader_s")), c["ref_ratio"]))
    if "open7" in o:
        c = o["open7"]
        lines.append("| mount-to-readable, 7 layers, token auth (token + manifest + layer headers), cold | %.3f s "
                     "(%.3f-%.3f) | | | %s | %s |" % (c["median_s"], min(c["runs"]), max(c["runs"]), TARGETS["open7"],
                                                      yes(c["pass"])))
        if "ref_median_s" in c:
            lines.append("| same, the build before (`--oci-ref-gm`) | %.3f s (%.3f-%.3f) | | | | |" % (
                c["ref_median_s"], min(c["ref_runs"]), max(c["ref_runs"])))
    if "remount" in o:
        c, med = o["remount"], o["remount"]["median"]
        lines.append("| cached remount + sha256 (blocks in --cache-dir, registry up, page cache dropped) | %.2f s, "
                     "%.0f MB/s%s | local mount of the shards + sha256 %.2f s, %.0f MB/s%s | %.2fx | %s | %s |" % (
                         med["cached_s"], c["cached_MBps"], cpu_text(med, "cached", ("daemon_s", "reader_s")),
                         med["local_s"], c["local_MBps"], cpu_text(med, "local", ("daemon_s", "reader_s")),
                         c["ratio"], TARGETS["remount"], yes(c["pass"])))
        if "ref_ratio" in c:
            lines.append("| same, the build before (`--oci-ref-gm`) | %.2f s%s | | %.2fx | | |" % (
                med["ref_s"], cpu_text(med, "ref", ("daemon_s", "reader_s")), c["ref_ratio"]))
    lines += ["", "Seconds from exec of gguf-mount (or curl) until the SHA-256 of every byte is computed; CPU: the "
              "daemon's (or curl's) user + system seconds, then the reader's hashing (medians).", ""]
    return lines


def write_report(res, out):
    e = res["env"]
    name = ("quick-oci-" if e["quick"] else "oci-") + e["date"][:10]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    lines = ["# gguf-mount OCI registry benchmark (%s)" % name, "",
             "%s UTC; Linux %s, %d CPUs (%s); docker-registry %s; load average (1, 5, 15 min) at the start %s, at "
             "the end %s%s." % (e["date"], e["kernel"], e["cpus"], e["cpu"], e["docker_registry"],
                                " ".join("%.2f" % x for x in res["load_start"]),
                                " ".join("%.2f" % x for x in res.get("load_end", [])),
                                "; the registry's storage is read back into memory after each drop of the page cache (a remote "
                                "registry's disk is not this machine's)" if e["can_drop_caches"]
                                else "; drop_caches NOT permitted: cold rows are not cold"),
             ""] + oci_table({"oci": res})
    for row in ("cold", "open7", "remount"):
        if row in res:
            lines.append("- %s runs: %s" % (row, json.dumps(res[row]["runs"])))
    lines += ["", "Reproduce: `sudo bench/run.sh --sections oci` (`--quick`: 192 MiB). See bench/README.md "
              "(\"OCI registries\") and bench/oci.py for what each row times. Only 127.0.0.1 was contacted."]
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    """Runs the section alone: bench/oci.py [--quick] [--runs N] [--rows cold,open7,remount] [-v]."""
    import argparse
    import bench
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default=os.environ.get("GGUF_BENCH_DATA", os.path.join(REPO, "bench", "data")))
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--rows", default="cold,open7,remount")
    ap.add_argument("--ref-gm", dest="oci_ref_gm", default=None, help="another gguf-mount build measured in the same "
                    "runs (the build before a change)")
    ap.add_argument("-v", "--oci-verbose", action="store_true", help="daemons log at debug level (DATA/oci/run/daemon.log)")
    a = ap.parse_args()
    if a.quick and a.data == os.path.join(REPO, "bench", "data"):
        a.data = os.path.join(a.data, "quick")
    b = bench.Bench(a)
    b.check_drop()
    try:
        run_oci(b, bench.log, a.rows.split(","))
    finally:
        b.cleanup.all()


if __name__ == "__main__":
    main()
