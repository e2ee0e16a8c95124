# The README's "Past one machine" with pystalk, end to end. Not a program
# by itself: tests/recipe_pystalk.rs puts the recipe the README links,
# tests/recipes/shards.py (the producers' pool, the worker's Shard and
# work), in front of it. Three servers with -b and --job-id-step 3,
# producers on ProductionPool, workers running the recipe's loop; one server SIGKILLed and restarted on its port, one
# retired (taken out of the producers' lists, then drained) while puts and
# workers run. Every acknowledged put must be deleted exactly once, on the
# server its id names, and none may reach the retired server after its
# drain. Loopback only; bounded; only the servers started here are
# signalled (their pids are written to DIR/pids for the Rust side, should
# this script itself have to be killed). python3 SCRIPT BEANSTALK DIR.
import collections
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import logging

from pystalk.client import BeanstalkError
from pystalk.pool import NoMoreClients

SERVERS, PRODUCERS, PUTS_EACH, WORKERS = 3, 3, 300, 3
MISSED = 0  # the producer whose list is not changed: it meets DRAINING
RETIRED = 2  # the server retired (ids 3, 6, 9, ...)
KILLED = 0  # the server killed and restarted (ids 1, 4, 7, ...)
LIMIT = 90  # seconds, for the whole run

BINARY, WORKDIR = sys.argv[1], sys.argv[2]
started = time.monotonic()


def late():
    return time.monotonic() - started > LIMIT


def route(job_id):
    """Server s (0-based) has --job-id-start s+1: ids that leave s+1 mod 3."""
    return (job_id + 2) % SERVERS


def free_port_outside_ephemeral_range():
    """A free port that the kernel never hands to a bind of port 0: the
    server restarted on it must find it free, though the other tests of the
    suite bind ephemeral ports meanwhile."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random(os.getpid())
    for _ in range(1000):
        port = rng.randrange(max(1024, low - 12000), low)
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            probe.close()
    raise RuntimeError("no free port below the ephemeral range")


class Servers:
    def __init__(self):
        self.procs, self.ports = [None] * SERVERS, []
        for s in range(SERVERS):
            os.mkdir(os.path.join(WORKDIR, "s%d" % s))
            self.ports.append(free_port_outside_ephemeral_range())
            self.start(s)

    def start(self, s):
        args = [BINARY, "-l", "127.0.0.1", "-p", str(self.ports[s]), "-b", os.path.join(WORKDIR, "s%d" % s),
                "--job-id-start", str(s + 1), "--job-id-step", str(SERVERS)]
        for _ in range(50):  # the port may linger a moment after a kill
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            with open(os.path.join(WORKDIR, "pids"), "a") as pids:
                pids.write("%d\n" % proc.pid)
            while proc.poll() is None and not late():
                try:
                    socket.create_connection(("127.0.0.1", self.ports[s]), timeout=1).close()
                    self.procs[s] = proc
                    return
                except OSError:
                    time.sleep(0.02)
            proc.wait()
            time.sleep(0.1)
        raise RuntimeError("server %d did not start" % s)

    def addrs(self):
        return [("127.0.0.1", p) for p in self.ports]

    def stats(self, s):
        c = Shard(self.addrs()[s])
        assert c.connect()
        c.send(b"stats\r\n")
        line = c.reader.readline()
        body = c.reader.read(int(line.split()[1]) + 2).decode()
        c.close()
        return dict(l.split(": ", 1) for l in body.splitlines()[1:] if ": " in l)

    def jobs(self, s):
        st = self.stats(s)
        return sum(int(st["current-jobs-" + k]) for k in ("ready", "reserved", "delayed", "buried"))

    def stop_all(self):
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}  # id -> body
        self.delivered = collections.Counter()  # body -> times handed to a worker
        self.deleted = collections.Counter()  # id -> DELETED replies
        self.delete_sent = set()
        self.draining = 0
        self.puts_done = collections.Counter()  # producer -> puts acknowledged
        self.aborted = self.raced = 0
        self.violations = []


# pystalk logs each failed server it skips; the summary says what matters.
logging.getLogger("pystalk").setLevel(logging.CRITICAL)
ledger = Ledger()
state = {"shards": None, "generation": 0}
_Base = Shard


class Recorded(_Base):
    """The recipe's Shard, watched: what was sent, what came back."""

    sent = b""

    def send(self, line):
        super().send(line)
        self.sent = line
        if line.startswith(b"delete "):
            with ledger.lock:
                ledger.delete_sent.add(int(line.split()[1]))

    def reply(self):
        words, body = super().reply()
        with ledger.lock:
            if words[0] == b"DELETED":
                job_id = int(self.sent.split()[1])
                ledger.deleted[job_id] += 1
                s = servers.addrs().index(self.addr)
                if route(job_id) != s:
                    ledger.violations.append("job %d deleted on server %d" % (job_id, s))
            elif words[0] == b"RESERVED" and self.sent == b"\r\n":
                ledger.raced += 1
            elif words[0] == b"ABORTED":
                ledger.aborted += 1
        return words, body


Shard = Recorded


def producer(k):
    generation, pool = None, None
    for n in range(PUTS_EACH):
        body = b"p%d-%d" % (k, n)
        while not late():
            # A producer picks up a changed list (MISSED does only when told DRAINING).
            if pool is None or (k != MISSED and generation != state["generation"]):
                generation, pool = state["generation"], producer_pool(state["shards"])
            try:
                _, job_id = pool.put_job(body)  # (b"INSERTED", id)
                break
            except BeanstalkError as e:
                if e.message != "DRAINING":
                    raise
                # Not accepted; pystalk's pool does not move on from it by
                # itself, so take the current list and put again.
                with ledger.lock:
                    ledger.draining += 1
                pool = None
            except NoMoreClients:
                time.sleep(0.05)
        else:
            return
        with ledger.lock:
            ledger.acked[job_id] = body
            ledger.puts_done[k] += 1
        time.sleep(0.003)


def handle(body):
    with ledger.lock:
        ledger.delivered[body] += 1


def main():
    global servers
    servers = Servers()
    state["shards"] = servers.addrs()
    running = [True]
    workers = [threading.Thread(target=work, args=(servers.addrs(), handle, lambda: running[0]))
               for _ in range(WORKERS)]
    producers = [threading.Thread(target=producer, args=(k,)) for k in range(PRODUCERS)]
    for t in workers + producers:
        t.start()
    total = PRODUCERS * PUTS_EACH

    def progress(share):
        while len(ledger.acked) < total * share and not late():
            time.sleep(0.01)

    # A crash: SIGKILL one server mid-run, restart it on its port.
    progress(0.2)
    servers.procs[KILLED].kill()
    servers.procs[KILLED].wait()
    time.sleep(0.3)
    servers.start(KILLED)

    # Retiring: out of the producers' lists first, then drain mode.
    progress(0.45)
    state["shards"] = [a for s, a in enumerate(servers.addrs()) if s != RETIRED]
    state["generation"] += 1
    servers.procs[RETIRED].send_signal(signal.SIGUSR1)
    # Round-robin, MISSED meets the retired server within three puts, if
    # it has puts left once the drain is on: whether it did is read from
    # the server (its `cmd-put` counts the puts answered DRAINING), since a
    # busy machine may let MISSED finish first.
    while servers.stats(RETIRED)["draining"] != "true" and not late():
        time.sleep(0.01)
    put_at_drain = servers.stats(RETIRED)["total-jobs"]
    tried_at_drain = int(servers.stats(RETIRED)["cmd-put"])
    while servers.jobs(RETIRED) and not late():
        time.sleep(0.05)
    put_at_stop = servers.stats(RETIRED)["total-jobs"]
    tried_after_drain = int(servers.stats(RETIRED)["cmd-put"]) - tried_at_drain
    if put_at_stop != put_at_drain:
        ledger.violations.append("retired server: total-jobs %s at its drain, %s at its stop" % (put_at_drain, put_at_stop))
    servers.procs[RETIRED].terminate()
    servers.procs[RETIRED].wait()

    for t in producers:
        t.join()
    left = lambda: [i for i in ledger.acked if not ledger.deleted[i] and i not in ledger.delete_sent]
    while (left() or any(servers.jobs(s) for s in range(SERVERS) if s != RETIRED)) and not late():
        time.sleep(0.05)
    running[0] = False
    for t in workers:
        t.join()

    for job_id in ledger.acked:
        n = ledger.deleted[job_id]
        if n > 1 or (n == 0 and job_id not in ledger.delete_sent):
            ledger.violations.append("job %d deleted %d times" % (job_id, n))
    if len(ledger.acked) != total:
        ledger.violations.append("%d of %d puts acknowledged" % (len(ledger.acked), total))
    if not ledger.draining and tried_after_drain > 0:
        ledger.violations.append("puts reached the retired server after its drain, yet none met DRAINING")
    if not ledger.aborted + ledger.raced:
        ledger.violations.append("no wait was ever called off")
    twice = sum(1 for n in ledger.delivered.values() if n > 1)
    unconfirmed = sum(1 for i in ledger.acked if not ledger.deleted[i])
    print("acknowledged %d, deleted %d (%d more unconfirmed), worked twice %d, jobs that raced a call-off %d, "
          "waits called off %d, DRAINING %d, %.1f s"
          % (len(ledger.acked), sum(ledger.deleted.values()), unconfirmed, twice, ledger.raced, ledger.aborted,
             ledger.draining, time.monotonic() - started))
    for v in ledger.violations[:20]:
        print("violation:", v)
    return 1 if ledger.violations or late() else 0


servers = None

if __name__ == "__main__":
    try:
        code = main()
    finally:
        if servers is not None:
            servers.stop_all()
    sys.exit(code)
