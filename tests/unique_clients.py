"""Clients that never send a key (greenstalk, pystalk) beside keyed jobs.

Run by tests/unique_clients.rs with the port of a fresh server and the
tests' hang guard in seconds (how long a reply may take). A raw
socket puts jobs with tuber's `idp:` keys into tube `keyed`; greenstalk and
pystalk then work the same server as they would any beanstalkd, and see
the keyed job as the plain job it is. Any difference in a reply they parse
raises. Prints "ok" at the end.
"""
import socket
import sys

import greenstalk
from pystalk import BeanstalkClient

port, hang_guard = int(sys.argv[1]), int(sys.argv[2])

raw = socket.create_connection(("127.0.0.1", port), timeout=hang_guard)
replies = raw.makefile("rb")


def raw_cmd(line, body=None):
    raw.sendall(line + b"\r\n" + (body + b"\r\n" if body is not None else b""))
    return replies.readline()


assert raw_cmd(b"use keyed") == b"USING keyed\r\n"
first = raw_cmd(b"put 5 0 60 5 idp:order-1", b"first")
assert first.startswith(b"INSERTED "), first
keyed_id = int(first.split()[1])
assert raw_cmd(b"put 5 0 60 5 idp:order-1", b"again") == b"INSERTED %d READY\r\n" % keyed_id
assert raw_cmd(b"put 1 0 60 5 idp:order-1", b"again") == b"INSERTED %d READY 1\r\n" % keyed_id

# greenstalk: the keyed job is a plain job, reserved first for its
# lowered priority; stats see one job in the tube.
with greenstalk.Client(("127.0.0.1", port), use="default", watch=["default", "keyed"]) as g:
    plain_id = g.put("plain", priority=10)
    assert g.stats_tube("keyed")["current-jobs-ready"] == 1
    job = g.reserve(timeout=1)
    assert (job.id, job.body) == (keyed_id, "first"), (job.id, job.body)
    assert g.stats_job(job)["pri"] == 1
    g.release(job, priority=7)
    job = g.reserve(timeout=1)
    assert job.id == keyed_id
    g.bury(job, priority=7)
    g.use("keyed")  # kick works on the tube used
    assert g.kick(1) == 1
    job = g.reserve(timeout=1)
    assert job.id == keyed_id
    g.delete(job)
    job = g.reserve(timeout=1)
    assert (job.id, job.body) == (plain_id, "plain")
    g.delete(job)
    assert g.stats()["current-jobs-ready"] == 0
    assert g.stats_tube("keyed")["total-jobs"] == 1

# The key left with its job (no cooldown): the same key makes a new job.
again = raw_cmd(b"put 5 0 60 5 idp:order-1", b"later")
assert again.startswith(b"INSERTED ") and int(again.split()[1]) > keyed_id, again

# pystalk: the same, through its own parser.
p = BeanstalkClient("127.0.0.1", port)
p.watch("keyed")
p.watch("default")
job = p.reserve_job(timeout=1)
assert job.job_data == b"later", job
p.delete_job(job.job_id)
p.put_job("from pystalk")
job = p.reserve_job(timeout=1)
assert job.job_data == b"from pystalk", job
p.delete_job(job.job_id)
assert p.stats()["current-jobs-ready"] == 0
print("ok")
