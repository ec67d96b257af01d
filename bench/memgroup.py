"""A memory cgroup of the benchmark's own (issue 32 items 4-5): a child of the cgroup the benchmark
runs in, with an optional memory limit, into which the processes of one measurement are started
(`prefix()` is put before their command: it moves the shell into the group, then execs).

cgroup v2 (`/sys/fs/cgroup` is cgroup2): DIR = /sys/fs/cgroup/<own path>/<name>, limit memory.max,
page cache from memory.stat `file`, OOM kills from memory.events `oom_kill`; needs the memory
controller enabled in the parent's cgroup.subtree_control (written here when allowed).
cgroup v1 (a `memory` hierarchy): DIR = /sys/fs/cgroup/memory/<own path>/<name>, limit
memory.limit_in_bytes, page cache from memory.stat `total_cache`, OOM kills from
memory.oom_control `oom_kill` (kernel >= 4.13).
Page cache is charged to the group of the process that first brings a page in, so a group that
holds every process of a measurement (daemon, downloader, loaders) holds all the page cache it
caused. Removed (rmdir) by `remove()`, once its processes have exited.
"""
import os
import threading
import time


def _own_path(controller):
    """This process's cgroup path for `controller` ("" = the unified v2 line)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if (controller == "" and ctrls == "") or controller in ctrls.split(","):
                return path
    return None


class MemGroup:
    """A child memory cgroup `name` of this process's own, `limit` bytes (None: no limit)."""

    def __init__(self, name, limit=None):
        self.v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        if self.v2:
            own = _own_path("")
            parent = "/sys/fs/cgroup" + (own if own != "/" else "")
            ctl = os.path.join(parent, "cgroup.subtree_control")
            if "memory" not in open(ctl).read().split():
                with open(ctl, "w") as f:  # refused (EBUSY) when the parent itself holds processes
                    f.write("+memory")
        else:
            own = _own_path("memory")
            if own is None:
                raise OSError("no memory cgroup hierarchy (v1 'memory' or v2) in /proc/self/cgroup")
            parent = "/sys/fs/cgroup/memory" + (own if own != "/" else "")
        self.dir = os.path.join(parent, name)
        if os.path.isdir(self.dir):
            os.rmdir(self.dir)
        os.mkdir(self.dir)
        self.limit = limit
        if limit:
            self._write("memory.max" if self.v2 else "memory.limit_in_bytes", str(limit))
        self._peak = 0
        self._stop = None

    def _write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value)

    def _read(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()

    def prefix(self):
        """Command prefix that runs the rest of the command inside the group."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.dir]

    def page_cache(self):
        """Bytes of page cache charged to the group now."""
        key = "file" if self.v2 else "total_cache"
        for line in self._read("memory.stat").splitlines():
            k, v = line.split()
            if k == key:
                return int(v)
        return 0

    def usage(self):
        """Bytes charged to the group now (anonymous memory and page cache)."""
        return int(self._read("memory.current" if self.v2 else "memory.usage_in_bytes"))

    def oom_kills(self):
        """OOM kills inside the group so far."""
        src = "memory.events" if self.v2 else "memory.oom_control"
        for line in self._read(src).splitlines():
            k, v = line.split()
            if k == "oom_kill":
                return int(v)
        return 0

    def start_sampling(self, every=0.05):
        """Starts recording the peak page cache (`peak_cache()`) every `every` seconds."""
        self._peak = self.page_cache()
        self._stop = threading.Event()

        def loop():
            while not self._stop.wait(every):
                try:
                    self._peak = max(self._peak, self.page_cache())
                except OSError:
                    return
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def peak_cache(self):
        """Stops the sampling; the largest page cache seen (bytes)."""
        if self._stop:
            self._stop.set()
            self._thread.join()
            self._stop = None
            self._peak = max(self._peak, self.page_cache())
        return self._peak

    def remove(self):
        """Removes the group (its processes must have exited; waits up to 5 s for that)."""
        if self._stop:
            self.peak_cache()
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
