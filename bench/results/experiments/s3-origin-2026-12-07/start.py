import os, sys, json, shutil
sys.path.insert(0, "/work/main/bench")
import remote_s3
run = "/var/tmp/s3prof/run"
shutil.rmtree(run, ignore_errors=True); os.makedirs(run)
seed = os.path.join(run, "s3-seed"); os.makedirs(os.path.join(seed, "bench", "llama"))
sd = "/var/tmp/bench-data/large-mid/shards"
for n in sorted(os.listdir(sd)):
    os.symlink(os.path.join(sd, n), os.path.join(seed, "bench", "llama", n))
class A: data = run
p, ready, log = remote_s3.start_s3(A, seed, run)
print(json.dumps({"pid": p.pid, "port": ready["proxy_port"]}))
