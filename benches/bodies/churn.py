"""Compaction under churn: N jobs of 4 KiB with bodies in the log (-s 1 MiB
files), then half of them deleted at random by one client while a probe
times `list-tube-used` round trips; then puts of as many again, deleted at
once, to make compaction move the survivors. Prints the probe's worst and
p99 round trip, records migrated and the disk used before and after."""
import json, os, random, socket, subprocess, sys, tempfile, threading, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
flags = sys.argv[2:]
PREFIX = os.environ.get("PREFIX", "").split()  # e.g. "strace -f -T -o FILE"
port = 11950 + random.randrange(40)
d = tempfile.mkdtemp(dir=os.environ.get("WORK"))
srv = subprocess.Popen(PREFIX + [os.environ.get("BEANSTALK", "target/release/beanstalk"), "-l", "127.0.0.1", "-p", str(port), "-b", d, "-s", "1048576"] + flags)
time.sleep(0.3)
def conn():
    c = socket.create_connection(("127.0.0.1", port)); return c, c.makefile("rb")
s, f = conn()
s.sendall(b"use churn\r\n"); f.readline()
body = os.urandom(4096).replace(b"\r\n", b"xx")
def put_many(n):
    ids = []
    for start in range(0, n, 500):
        s.sendall(b"".join(b"put 0 0 60 4096\r\n" + body + b"\r\n" for _ in range(500)))
        ids += [int(f.readline().split()[1]) for _ in range(500)]
    return ids
def du():
    return sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d) if x.startswith("beanstalk."))
def stat(key):
    s.sendall(b"stats\r\n"); n = int(f.readline().split()[1]); y = f.read(n + 2).decode()
    return int([l for l in y.splitlines() if l.startswith(key + ":")][0].split()[1])
ids = put_many(N)
before = du()
# The probe: loadgen's cycle on one connection, another process, on the
# default tube, for as long as the churn lasts.
probe = subprocess.Popen([os.environ.get("LOADGEN", "loadgen"), "cycle", "--addr", f"127.0.0.1:{port}", "--conns", "1", "--duration", "40", "--pid", str(srv.pid)], stdout=subprocess.PIPE, text=True)
time.sleep(0.5)
churn_start = time.perf_counter()
random.shuffle(ids)
gone = ids[: N * 4 // 5]
for start in range(0, len(gone), 500):
    s.sendall(b"".join(b"delete %d\r\n" % i for i in gone[start:start + 500]))
    for _ in gone[start:start + 500]:
        f.readline()
# More writing: each client byte earns compaction two bytes of rewriting.
for _ in range(4):
    more = put_many(N // 5)
    for start in range(0, len(more), 500):
        s.sendall(b"".join(b"delete %d\r\n" % i for i in more[start:start + 500]))
        for _ in more[start:start + 500]:
            f.readline()
time.sleep(0.5)
churn_secs = time.perf_counter() - churn_start
pj = json.loads(probe.communicate()[0] or "{}")
print(json.dumps({"jobs": N, "churn_secs": round(churn_secs, 1), "probe_ops": pj.get("ops"), "probe_p99_us": pj.get("p99_us"), "probe_max_us": pj.get("max_us"), "migrated": stat("binlog-records-migrated"), "disk_before_mb": round(before / 1e6, 1), "disk_after_mb": round(du() / 1e6, 1), "live_mb": round(N / 5 * 4.2 / 1e3, 1)}))
# every survivor still whole
left = ids[N * 4 // 5:]
bad = 0
for i in random.sample(left, 2000):
    s.sendall(b"peek %d\r\n" % i); h = f.readline(); got = f.read(int(h.split()[2]) + 2)[:-2]
    bad += got != body
print(json.dumps({"checked": 2000, "bad": bad}))
srv.kill(); srv.wait(); subprocess.run(["rm", "-rf", d])
