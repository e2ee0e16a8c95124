"""Cold reads: N jobs of 4 KiB put into tube `cold`, the log dropped from the
page cache (posix_fadvise DONTNEED after a sync), then a reader peeks them in
random order while loadgen's cycle runs on the same single event loop
(--threads 1). The same again with the cache warm. Prints the reader's and
the cycle's latencies for both."""
import json, os, random, socket, subprocess, sys, tempfile, threading, time

LG = os.environ.get("LOADGEN", "loadgen")
OURS = os.environ.get("BEANSTALK", "target/release/beanstalk")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
flags = sys.argv[2:]
port = 11900 + random.randrange(50)
d = tempfile.mkdtemp(dir=os.environ.get("WORK"))
srv = subprocess.Popen([OURS, "-l", "127.0.0.1", "-p", str(port), "-b", d, "--threads", "1"] + flags)
time.sleep(0.3)
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"use cold\r\n"); s.recv(100)
body = os.urandom(4096).replace(b"\r\n", b"xx")
f = s.makefile("rb")
for start in range(0, N, 500):
    s.sendall(b"".join(b"put 0 0 60 4096\r\n" + body + b"\r\n" for _ in range(500)))
    for _ in range(500):
        f.readline()
os.sync()

def drop():
    for name in os.listdir(d):
        if name.startswith("beanstalk."):
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

def reader(out, stop):
    c = socket.create_connection(("127.0.0.1", port)); cf = c.makefile("rb")
    ids = list(range(1, N + 1)); random.shuffle(ids)
    lat = []
    for i in ids:
        if stop.is_set():
            break
        t = time.perf_counter()
        c.sendall(b"peek %d\r\n" % i)
        head = cf.readline(); cf.read(int(head.split()[2]) + 2)
        lat.append(time.perf_counter() - t)
    out.extend(lat)

def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(len(xs) * p))] * 1e3 if xs else 0

for label in ["cold", "warm", "none"]:
    if label == "cold":
        drop()
    lat, stop = [], threading.Event()
    th = threading.Thread(target=reader, args=(lat, stop))
    if label != "none":
        th.start()
    cyc = subprocess.run([LG, "cycle", "--addr", f"127.0.0.1:{port}", "--conns", "8", "--duration", "4", "--pid", str(srv.pid)], capture_output=True, text=True).stdout
    stop.set()
    if label != "none":
        th.join()
    j = json.loads(cyc)
    keys = {k: v for k, v in j.items() if k in ("ops_per_s", "p50_us", "p99_us", "p999_us", "max_us")}
    print(json.dumps({"run": label, "reader_peeks": len(lat), "reader_p50_ms": round(pct(lat, .5), 3), "reader_p99_ms": round(pct(lat, .99), 3), "reader_max_ms": round(max(lat) * 1e3, 3) if lat else 0, "cycle": keys}))
srv.kill(); srv.wait()
subprocess.run(["rm", "-rf", d])
