import os, sys, json, subprocess
sys.path.insert(0, "/work/main/bench")
import remote_s3
s = json.load(open("/var/tmp/s3prof/s3.json"))
class P:
    def __init__(s, pid): s.pid = pid
    def terminate(s): os.kill(s.pid, 15)
    def wait(s):
        import time
        while os.path.exists("/proc/%d" % s.pid) and open("/proc/%d/stat" % s.pid).read().split()[2] != "Z": time.sleep(0.05)
p, ready = remote_s3.restart_s3(P(s["pid"]), "/var/tmp/s3prof/run", s["port"])
json.dump({"pid": p.pid, "port": ready["proxy_port"]}, open("/var/tmp/s3prof/s3.json", "w"))
print(p.pid)
