"""Remote time to first token of a large model against download-then-load (issue 32 item 5), rows
`remote` and `memlimit` of the large section (bench/large.py; bench.py --sections large).

Sources, all on 127.0.0.1, serving the 4 shards of the section's mid-size model (DATA/large-mid):
- http: nginx (sendfile) serving the shard directory;
- hf: an emulation of the Hugging Face Hub's endpoints in the same nginx, as the tests'
  (tests/remote/hub_emulation.cpp): /api/models/ORG/REPO/revision/REV, the tree page with each
  file's LFS sha256, and /ORG/REPO/resolve/REV/PATH answering 302 to a second "CDN" server with
  X-Repo-Commit, X-Linked-Size, X-Linked-Etag; `HF_ENDPOINT` points the mount at it;
- s3: the objects served by the same nginx as bucket "bench", every request's Signature V4
  recomputed before it is answered (auth_request to bench/s3_origin.js, njs; 403 on a mismatch,
  checked at start by Servers.check_s3_origin): an origin whose CPU cost per byte is a server's
  (sendfile), as S3's is to its clients;
- s3rver: s3rver behind the tests' proxy that verifies every request's Signature V4
  (tests/remote/s3/s3_server.js, started as bench/remote_s3.py does), restarted on its data
  before every measurement (Servers.fresh_origin: no run inherits the node process of the one
  before). A node process on the client's own CPUs: it spent 5.1 to 9.6 CPU-seconds on the same
  pass of the 3.16 GB (bench/README.md "The S3 origin of the remote row"), so its rows measure
  the origin's share of the CPUs as much as the clients; reported with the origin's CPU seconds.

Paths, each timed from its first step to the first token of a [BOS] prompt (node-llama-cpp 3.22.1
started first, bench/first-token.mjs, mmap on as llama.cpp's default, 1 thread):
- mount: `gguf-mount SOURCE MNT` until the merged file reads, then llama.cpp loads it;
- download: what a user without gguf-mount does: `curl -o` of every shard (hf: the resolve URLs,
  following the redirect; s3, s3rver: `curl --aws-sigv4` to the verifying origin), then llama.cpp
  loads the first shard (it opens the others itself).
States: cold (page cache dropped, block cache empty, no download yet) and cached (page cache
dropped; the mount's block cache filled by the cold run before / the shards already downloaded).
Runs interleave the two paths (the first path alternates run by run).

memlimit: the same two paths from the http source with every process of the path (daemon or curl,
and the loader) in one memory cgroup limited to MEMLIMIT_BYTES, below the model's size
(bench/memgroup.py): cold, each path once per run, with a time limit (MEMLIMIT_TIMEOUT);
reported: time, whether it completed, OOM kills, the group's peak page cache.
"""
import hashlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import time

import memgroup
import real_client as rc
import remote as R
import remote_s3

GIB = float(1 << 30)
NJS_MODULE = "/usr/lib/nginx/modules/ngx_http_js_module.so"  # libnginx-mod-http-js (scripts/install-deps.sh)
ORG, REPO_NAME = "bench-org", "bench-llama"
COMMIT = "1111111111111111111111111111111111111111"
MEMLIMIT_BYTES = 3 << 29  # 1.5 GiB: half the mid model (2.9 GiB); --quick: 384 MiB (above its model: a smoke test)
MEMLIMIT_TIMEOUT = 300  # seconds from the model path's write to node giving up
PATHS = ("mount", "download")
SOURCES = ("http", "hf", "s3", "s3rver")
S3_SOURCES = ("s3", "s3rver")
CURL = ["curl", "-sSf", "--noproxy", "*"]


def _sha256(path, memo):
    """sha256 of `path`, remembered in the dict `memo` by (path, size, mtime)."""
    st = os.stat(path)
    key = "%s:%d:%d" % (path, st.st_size, st.st_mtime_ns)
    if key not in memo:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while True:
                b = f.read(8 << 20)
                if not b:
                    break
                h.update(b)
        memo[key] = h.hexdigest()
    return memo[key]


class Servers:
    """nginx (http source, Hub API, Hub CDN, the verifying S3 origin) and the s3rver S3 server for
    the shards in `shard_dir`."""

    def __init__(self, b, shard_dir, log):
        self.b, self.log = b, log
        self.run_dir = os.path.join(b.data, "run", "large-remote")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        os.makedirs(self.run_dir)
        self.shards = sorted(os.path.join(shard_dir, f) for f in os.listdir(shard_dir))
        self.names = [os.path.basename(s) for s in self.shards]
        self.procs = []
        memo_path = os.path.join(os.path.dirname(shard_dir), "SHA256.json")
        memo = json.load(open(memo_path)) if os.path.exists(memo_path) else {}
        self.sha = {n: _sha256(s, memo) for n, s in zip(self.names, self.shards)}
        with open(memo_path, "w") as f:
            json.dump(memo, f)
        self._start_nginx(shard_dir)
        self.check_s3_origin()
        self._start_s3(shard_dir)

    def _start_nginx(self, shard_dir):
        nd = os.path.join(self.run_dir, "nginx")
        www, api, cdn = (os.path.join(nd, d) for d in ("www", "api", "cdn"))
        os.makedirs(os.path.join(cdn, "blobs"))
        os.makedirs(www)
        os.symlink(shard_dir, os.path.join(www, "llama"))
        s3_root = os.path.join(nd, "s3")
        os.makedirs(os.path.join(s3_root, "bench"))
        os.symlink(shard_dir, os.path.join(s3_root, "bench", "llama"))
        listing = os.path.join(nd, "s3-listing.xml")
        with open(listing, "w") as f:
            f.write(self._s3_listing())
        self.port, self.api_port, self.cdn_port = R.free_port(), R.free_port(), R.free_port()
        self.s3_origin_port = R.free_port()
        # The Hub's answers (formats: remote/hub.hpp, as tests/remote/hub_emulation.cpp serves them).
        repo_dir = os.path.join(api, "api", "models", ORG, REPO_NAME)
        tree = [{"type": "file", "oid": self.sha[n][:40], "size": os.path.getsize(s), "path": n,
                 "lfs": {"oid": self.sha[n], "size": os.path.getsize(s), "pointerSize": 134}}
                for n, s in zip(self.names, self.shards)]
        for rev in ("main", COMMIT):
            os.makedirs(os.path.join(repo_dir, "revision", rev))
            with open(os.path.join(repo_dir, "revision", rev, "__page.json"), "w") as f:
                json.dump({"id": ORG + "/" + REPO_NAME, "sha": COMMIT}, f)
            os.makedirs(os.path.join(repo_dir, "tree", rev))
            with open(os.path.join(repo_dir, "tree", rev, "__page.json"), "w") as f:
                json.dump(tree, f)
        maps = {"target": [], "size": [], "etag": []}
        for n, s in zip(self.names, self.shards):
            os.symlink(s, os.path.join(cdn, "blobs", self.sha[n]))
            for rev in ("main", COMMIT):
                key = "/%s/%s/resolve/%s/%s" % (ORG, REPO_NAME, rev, n)
                maps["target"].append('    "%s" "http://127.0.0.1:%d/blobs/%s?X-Amz-Signature=emulated&Expires=4102444800";'
                                      % (key, self.cdn_port, self.sha[n]))
                maps["size"].append('    "%s" "%d";' % (key, os.path.getsize(s)))
                maps["etag"].append("    \"%s\" '\"%s\"';" % (key, self.sha[n]))
        temp = " ".join("%s_temp_path %s;" % (k, nd) for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        bench_dir = os.path.dirname(os.path.abspath(__file__))
        fleet_dir = os.path.join(os.path.dirname(bench_dir), "docs", "fleet")
        conf = f"""daemon off; worker_processes 1; pid {nd}/nginx.pid; error_log {nd}/error.log warn;
load_module {NJS_MODULE};
events {{ worker_connections 1024; }}
http {{
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000; {temp}
  js_path {bench_dir}; js_path {fleet_dir}; js_import bench_s3 from s3_origin.js;
  map_hash_bucket_size 512;
  map $uri $hub_cdn_target {{ default ""; {chr(10).join(maps["target"])} }}
  map $uri $hub_linked_size {{ default ""; {chr(10).join(maps["size"])} }}
  map $uri $hub_linked_etag {{ default ""; {chr(10).join(maps["etag"])} }}
  server {{ listen 127.0.0.1:{self.port}; root {www}; }}
  server {{ listen 127.0.0.1:{self.cdn_port}; root {cdn}; }}
  server {{
    listen 127.0.0.1:{self.s3_origin_port}; root {s3_root}; disable_symlinks off;
    location = /_verify {{
      internal; set $bench_s3_key {remote_s3.KEY_ID}; set $bench_s3_secret {remote_s3.SECRET};
      js_content bench_s3.verify;
    }}
    location /bench/ {{ auth_request /_verify; }}
    location = /bench {{ auth_request /_verify; default_type application/xml; alias {listing}; }}
    location / {{ return 403; }}
  }}
  server {{
    listen 127.0.0.1:{self.api_port}; root {api}; absolute_redirect off;
    location /api/ {{ default_type application/json; try_files $uri/__page$arg_cursor.json =404; }}
    location /{ORG}/{REPO_NAME}/resolve/ {{
      add_header X-Repo-Commit {COMMIT} always;
      add_header X-Linked-Size $hub_linked_size always;
      add_header X-Linked-Etag $hub_linked_etag always;
      if ($hub_cdn_target != "") {{ return 302 $hub_cdn_target; }}
      return 404;
    }}
  }}
}}
"""
        with open(os.path.join(nd, "nginx.conf"), "w") as f:
            f.write(conf)
        p = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", nd + "/nginx.conf", "-p", nd + "/",
                              "-e", nd + "/error.log"])
        self.procs.append(p)
        self.b.cleanup.add(os.path.join(nd, "none"), p.pid)
        for _ in range(200):
            try:
                for port in (self.port, self.api_port, self.cdn_port):
                    R.socket.create_connection(("127.0.0.1", port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start (see %s/error.log)" % nd)

    def _s3_listing(self):
        """The ListObjectsV2 page of prefix "llama/" (delimiter "/") that the nginx S3 origin answers
        for any listing of bucket "bench" (a mount of s3://bench/llama/ asks for it; the shard form
        s3://bench/llama/KEY-00001-of-N.gguf lists nothing): each shard's key, size, and the ETag
        and Last-Modified nginx sends for it (ETag "<mtime hex>-<size hex>")."""
        items = []
        for n, path in zip(self.names, self.shards):
            st = os.stat(path)
            modified = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(int(st.st_mtime)))
            items.append("<Contents><Key>llama/%s</Key><LastModified>%s</LastModified><ETag>&quot;%x-%x&quot;</ETag>"
                         "<Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>" % (
                             n, modified, int(st.st_mtime), st.st_size, st.st_size))
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                "<Name>bench</Name><Prefix>llama/</Prefix><Delimiter>/</Delimiter><KeyCount>%d</KeyCount>"
                "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>%s</ListBucketResult>" % (len(items), "".join(items)))

    def check_s3_origin(self):
        """Refuses to measure against a verifying S3 origin that does not verify: a request whose
        signature is one character off must get 403, the same request correctly signed 206."""
        host = "127.0.0.1:%d" % self.s3_origin_port
        path = "/bench/llama/" + self.names[0]
        for wrong in (True, False):
            h = remote_s3.sigv4_headers(host, path)
            if wrong:
                sig = h["Authorization"][-1]
                h["Authorization"] = h["Authorization"][:-1] + ("0" if sig != "0" else "1")
            h["Range"] = "bytes=0-99"
            c = http.client.HTTPConnection("127.0.0.1", self.s3_origin_port, timeout=10)
            c.request("GET", path, headers=h)
            status = c.getresponse().status
            c.close()
            if status != (403 if wrong else 206):
                raise RuntimeError("the bench's S3 origin answered %d to a %s signature (see %s)" % (
                    status, "wrong" if wrong else "correct", os.path.join(self.run_dir, "nginx", "error.log")))

    def _start_s3(self, shard_dir):
        seed = os.path.join(self.run_dir, "s3-seed")
        os.makedirs(os.path.join(seed, "bench", "llama"))
        for n, s in zip(self.names, self.shards):  # the seed walk takes a linked directory for a file
            os.symlink(s, os.path.join(seed, "bench", "llama", n))
        t0 = time.monotonic()

        class A:  # what remote_s3.start_s3 reads of its arguments
            data = self.run_dir
        p, ready, self.s3_log = remote_s3.start_s3(A, seed, self.run_dir)
        self.s3_proc = p
        self.procs.append(p)
        self.b.cleanup.add(os.path.join(self.run_dir, "none"), p.pid)
        self.s3_endpoint = "http://127.0.0.1:%d" % ready["proxy_port"]
        self.log("large remote: S3 server seeded with %d shards in %.0f s" % (len(self.shards), time.monotonic() - t0))

    def fresh_origin(self, source):
        """Before each measurement of `source`: for s3rver, the S3 test server restarted on its
        data and port (remote_s3.restart_s3): no measurement inherits the state of the node
        process the one before used; nginx (http, hf, s3) needs nothing."""
        if source != "s3rver":
            return
        old = self.s3_proc
        p, _ = remote_s3.restart_s3(old, self.run_dir, int(self.s3_endpoint.rsplit(":", 1)[1]))
        self.procs[self.procs.index(old)] = p
        if old.pid in self.b.cleanup.pids:
            self.b.cleanup.pids.remove(old.pid)
        self.b.cleanup.add(os.path.join(self.run_dir, "none"), p.pid)
        self.s3_proc = p

    def stop(self):
        for p in self.procs:
            p.terminate()
            p.wait()
        shutil.rmtree(os.path.join(self.run_dir, "s3", "data"), ignore_errors=True)

    # ---- what each source is, for the mount and for curl -------------------------------------------
    def origin_files(self, source):
        """The files the server of `source` reads to answer (bench.py drop_caches keeps them
        cached): the shards for nginx (http, hf, s3), s3rver's object store for s3rver."""
        return [os.path.join(self.run_dir, "s3", "data")] if source == "s3rver" else list(self.shards)

    def env(self, source):
        """Environment of a mount of `source` (and of nothing else)."""
        home = os.path.join(self.run_dir, "hf-home")
        e = {"HF_HOME": home, "XDG_CACHE_HOME": os.path.join(self.run_dir, "xdg")}
        if source == "hf":
            e["HF_ENDPOINT"] = "http://127.0.0.1:%d" % self.api_port
        if source in S3_SOURCES:
            none = os.path.join(self.run_dir, "none")
            e.update({"AWS_ACCESS_KEY_ID": remote_s3.KEY_ID, "AWS_SECRET_ACCESS_KEY": remote_s3.SECRET,
                      "AWS_ENDPOINT_URL_S3": self.s3_url(source), "AWS_REGION": "us-east-1",
                      "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_CONFIG_FILE": none})
        return e

    def s3_url(self, source):
        """The S3 endpoint of an S3 source: nginx's verifying origin (s3) or s3rver's proxy (s3rver)."""
        return "http://127.0.0.1:%d" % self.s3_origin_port if source == "s3" else self.s3_endpoint

    def mount_source(self, source, before=False):
        """The SOURCE a mount of `source` is given; `before` (--large-ref-gm's build): s3 as the
        prefix s3://bench/llama/, the form builds before the shard form (2026-12-02) have."""
        first = self.names[0]
        if source in S3_SOURCES:
            return "s3://bench/llama/" if before else "s3://bench/llama/%s" % first
        return {"http": "http://127.0.0.1:%d/llama/%s" % (self.port, first),
                "hf": "hf://%s/%s/%s" % (ORG, REPO_NAME, first)}[source]

    def curl_cmd(self, source, out_dir):
        """The download of every shard into out_dir, as a user without gguf-mount does it."""
        outs = [os.path.join(out_dir, n) for n in self.names]
        if source == "http":
            urls = ["http://127.0.0.1:%d/llama/%s" % (self.port, n) for n in self.names]
            return CURL + sum((["-o", o, u] for o, u in zip(outs, urls)), [])
        if source == "hf":  # hf download / huggingface-cli fetch the resolve URLs and follow the redirect
            urls = ["http://127.0.0.1:%d/%s/%s/resolve/main/%s" % (self.api_port, ORG, REPO_NAME, n) for n in self.names]
            return CURL + ["-L"] + sum((["-o", o, u] for o, u in zip(outs, urls)), [])
        urls = ["%s/bench/llama/%s" % (self.s3_url(source), n) for n in self.names]
        return CURL + ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", remote_s3.KEY_ID + ":" + remote_s3.SECRET,
                       "-H", "x-amz-content-sha256: " + remote_s3.EMPTY_SHA256] + sum((["-o", o, u] for o, u in zip(outs, urls)), [])


def _umount(b, mnt, p):
    """Unmounts and waits for the daemon to exit (it commits every fetched block first)."""
    b.cleanup.unmount(mnt)
    try:
        p.wait(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    b.cleanup.unmount(mnt, p.pid)


class Path:
    """One way to the first token from one source: prepare() -> model path, cleanup(). `path`:
    "mount" (this build), "before" (a mount by --large-ref-gm's build) or "download"."""

    def __init__(self, b, srv, source, path, prefix=()):
        self.b, self.srv, self.source, self.path, self.prefix = b, srv, source, path, list(prefix)
        self.gm = b.a.large_ref_gm if path == "before" else b.gm
        base = os.path.join(b.data, "tmp", "large-remote")
        self.cache = os.path.join(base, "cache-" + source + ("-before" if path == "before" else ""))
        self.out = os.path.join(base, "dl-" + source)
        self.mnt = os.path.join(b.data, "mnt", "large-remote")
        self.p = None
        self.daemon_cpu = None  # CPU seconds of the daemon from readable to unmount (the last mount)

    def reset(self):
        """Nothing cached: this path's own state only (the mount's block cache, or the download),
        so that the other path's cold run does not empty this one's cache."""
        shutil.rmtree(self.out if self.path == "download" else self.cache, ignore_errors=True)

    def prepare(self):
        if self.path != "download":
            self.p = self.b.start_daemon(
                "large-remote-" + self.source, self.prefix + [self.gm, "-f", "--log-level", "warn", "--cache-dir",
                                                              self.cache, self.srv.mount_source(self.source, self.path == "before"), self.mnt],
                self.mnt, os.path.join(self.mnt, "llama.gguf"), self.srv.env(self.source))
            self.cpu0 = _cpu_seconds(self.p.pid)
            return os.path.join(self.mnt, "llama.gguf")
        first = os.path.join(self.out, self.srv.names[0])
        if not os.path.exists(first):
            os.makedirs(self.out, exist_ok=True)
            subprocess.run(self.prefix + self.srv.curl_cmd(self.source, self.out), check=True)
        return first

    def cleanup(self):
        if self.p:
            self.daemon_cpu = _cpu_seconds(self.p.pid) - self.cpu0
            _umount(self.b, self.mnt, self.p)
            self.p = None


def _cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far (0 when gone)."""
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _one(b, pth, state, timeout=None):
    """One time-to-first-token measurement (rc.first_token) of Path `pth` in `state`; with the
    daemon's CPU seconds (daemon_cpu_s) for a mount."""
    if state == "cold":
        pth.reset()
    pth.daemon_cpu = None
    pth.srv.fresh_origin(pth.source)
    node = pth.srv.s3_proc.pid if pth.source == "s3rver" else None
    cpu0 = _cpu_seconds(node) if node else None
    # The origin's files stay in memory (bench.py drop_caches): a remote server's disk is not ours.
    r = rc.first_token(pth.prepare, pth.cleanup, lambda: b.drop_caches(pth.srv.origin_files(pth.source)),
                       prefix=pth.prefix, timeout=timeout)
    r["daemon_cpu_s"] = pth.daemon_cpu
    if node:  # the s3rver process's CPU seconds over the whole measurement (both paths' origin)
        r["origin_cpu_s"] = _cpu_seconds(node) - cpu0
    return r


def run(b, mid, rows, runs_n, res, log):
    """The remote and memlimit rows (see the file note) into res["remote"] and res["memlimit"]."""
    model, first, info = mid
    for v in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT"):
        os.environ.pop(v, None)
    srv = Servers(b, os.path.dirname(first), log)
    try:
        if "remote" in rows:
            out = {"model_bytes": os.path.getsize(model), "layers": info["layers"], "shards": len(srv.names),
                   "runs": runs_n, "sources": {}}
            res["remote"] = out
            wanted = getattr(b.a, "large_sources", ",".join(SOURCES)).split(",")
            bad = set(wanted) - set(SOURCES)
            if bad:
                raise SystemExit("--large-sources: unknown %s (sources: %s)" % (",".join(sorted(bad)), ",".join(SOURCES)))
            ref = getattr(b.a, "large_ref_gm", None)
            if ref:
                out["ref_gm"] = ref
                # A build from before s3:// (2026-12-01) has no before path on the S3 sources.
                help_text = subprocess.run([ref, "mount", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True).stdout
                out["ref_sources"] = [s for s in SOURCES if s not in S3_SOURCES or "s3://" in help_text]
            for source in [s for s in SOURCES if s in wanted]:
                names = list(PATHS) + (["before"] if ref and source in out["ref_sources"] else [])
                paths = {k: Path(b, srv, source, k) for k in names}
                runs = {"%s %s" % (k, s): [] for k in names for s in ("cold", "cached")}
                out["sources"][source] = runs
                for i in range(runs_n):  # interleaved: each path first in turn
                    order = names[i % len(names):] + names[:i % len(names)]
                    for state in ("cold", "cached"):
                        for k in order:
                            runs["%s %s" % (k, state)].append(_one(b, paths[k], state))
                    log("large remote %s run %d: %s" % (source, i + 1, "  ".join(
                        "%s %.2f s" % (k, v[-1]["total_s"]) for k, v in runs.items())))
                for pth in paths.values():
                    pth.reset()
        if "memlimit" in rows:
            limit = (384 << 20) if b.a.quick else MEMLIMIT_BYTES
            out = {"model_bytes": os.path.getsize(model), "limit_bytes": limit, "runs": {k: [] for k in PATHS},
                   "timeout_s": MEMLIMIT_TIMEOUT}
            res["memlimit"] = out
            for i in range(min(runs_n, 2)):
                for k in (PATHS if i % 2 == 0 else PATHS[::-1]):
                    g = memgroup.MemGroup("gguf-bench-memlimit", limit)
                    pth = Path(b, srv, "http", k, g.prefix())
                    g.start_sampling()
                    t0 = time.monotonic()
                    try:
                        r = _one(b, pth, "cold", MEMLIMIT_TIMEOUT)
                        r["completed"] = True
                    except (RuntimeError, subprocess.CalledProcessError) as e:
                        pth.cleanup()
                        r = {"completed": False, "error": str(e).splitlines()[0][:300] if str(e) else repr(e),
                             "total_s": time.monotonic() - t0}
                    r["peak_cache"] = g.peak_cache()
                    r["oom_kills"] = g.oom_kills()
                    g.remove()
                    pth.reset()
                    out["runs"][k].append(r)
                    log("large memlimit %s run %d: %s" % (k, i + 1, json.dumps(
                        {x: r.get(x) for x in ("completed", "total_s", "load_ms", "eval_ms", "oom_kills", "error")})))
    finally:
        srv.stop()


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def tables(v):
    """Markdown lines of the remote and memlimit rows of the large section result `v`."""
    lines = []
    rem = v.get("remote")
    if rem:
        lines += ["**Remote: time to first token against download-then-load**, a %.2f GiB llama model (%d layers) in %d "
                  "shards on 127.0.0.1; node-llama-cpp 3.22.1 mmap on, [BOS] prompt, 1 thread; seconds from the mount "
                  "(or the first `curl`) to the first token, median (min–max) of %d interleaved runs; ratio = "
                  "download / mount (target >= 1.0). Cold: page cache dropped, block cache empty; cached: page cache "
                  "dropped, the mount's block cache filled by the cold run / the shards already downloaded. The servers' "
                  "own files are read back into memory after each drop (a remote origin's disk is not this machine's). "
                  "In parentheses: seconds until the model path was ready (mount readable / curl done), "
                  "`loadModel`, first token; for the mount also the daemon's CPU seconds; for s3rver the origin's "
                  "(a node process on the same CPUs). s3: nginx serving the bucket, each request's SigV4 checked "
                  "(bench/s3_origin.js); s3rver: the tests' S3 server and its verifying proxy." % (rem["model_bytes"] / GIB, rem["layers"], rem["shards"], rem["runs"]),
                  "", "| source | cache | mount s (ready, load, eval) | download then load s (ready, load, eval) "
                  "| download / mount |", "|---|---|---|---|---|"]
        before_rows = []
        for source, runs in rem["sources"].items():
            for state in ("cold", "cached"):
                cells = []
                meds = {}
                for k in PATHS + (("before",) if "before cold" in runs else ()):
                    rs = runs["%s %s" % (k, state)]
                    t = [r["total_s"] for r in rs]
                    meds[k] = _med(t)
                    cpu = [r["daemon_cpu_s"] for r in rs if r.get("daemon_cpu_s") is not None]
                    origin = [r["origin_cpu_s"] for r in rs if r.get("origin_cpu_s") is not None]
                    cells.append("%.2f (%.2f–%.2f) (%.2f, %.2f, %.2f%s%s)" % (
                        meds[k], min(t), max(t), _med([r["prepare_s"] for r in rs]),
                        _med([r["load_ms"] for r in rs]) / 1000, _med([r["eval_ms"] for r in rs]) / 1000,
                        "; daemon CPU %.1f" % _med(cpu) if cpu else "",
                        "; s3rver CPU %.1f (%.1f–%.1f)" % (_med(origin), min(origin), max(origin)) if origin else ""))
                lines.append("| %s | %s | %s | %s | **%.2f** |" % (source, state, cells[0], cells[1],
                                                                 meds["download"] / meds["mount"]))
                if len(cells) > 2:
                    before_rows.append("| %s | %s | %.2f | %s | %.2f | %.2f | **%.2f** |" % (
                        source, state, meds["download"], cells[2], meds["mount"], meds["download"] / meds["before"],
                        meds["download"] / meds["mount"]))
        lines.append("")
        if before_rows:
            missing = [x for x in rem["sources"] if x not in rem.get("ref_sources", rem["sources"])]
            lines += ["**Before / after in the same runs**: the mount path also with `%s` (--large-ref-gm), its own "
                      "block cache, its runs interleaved with the other two; ratio = download / mount.%s" % (
                          rem["ref_gm"], " No before path for %s: that build has no s3:// source." % ", ".join(missing)
                          if missing else ""), "",
                      "| source | cache | download then load s | before: mount s (ready, load, eval) | after: mount s "
                      "| before: download / mount | after: download / mount |", "|---|---|---|---|---|---|---|"]
            lines += before_rows + [""]
    ml = v.get("memlimit")
    if ml:
        lines += ["**Memory-limited** (http source, cold): every process of the path (daemon or curl, and the loader) "
                  "in one memory cgroup limited to %.2f GiB (the model: %.2f GiB); time limit %d s per run:" % (
                      ml["limit_bytes"] / GIB, ml["model_bytes"] / GIB, ml["timeout_s"]), "",
                  "| path | runs | completed | seconds (load, first token) | OOM kills | peak page cache in the group GiB |",
                  "|---|---|---|---|---|---|"]
        for k, rs in ml["runs"].items():
            ok = [r for r in rs if r.get("completed")]
            secs = ", ".join("%.1f (%s, %s)" % (r["total_s"], "%.1f" % (r["load_ms"] / 1000) if r.get("load_ms") else "–",
                                                  "%.1f" % (r["eval_ms"] / 1000) if r.get("eval_ms") else "–") for r in rs)
            errs = "; ".join(r["error"] for r in rs if r.get("error"))
            lines.append("| %s | %d | %d%s | %s | %d | %s |" % (
                k, len(rs), len(ok), (" (" + errs + ")") if errs else "", secs, sum(r["oom_kills"] for r in rs),
                ", ".join("%.2f" % (r["peak_cache"] / GIB) for r in rs)))
        lines.append("")
    return lines
