"""Sharding in the client, with pystalk (`pip install pystalk`): the
producers' pool and the workers' loop of the README's "Past one machine".

K servers, each with its own -b directory, the same --job-id-step K and
its own --job-id-start (1 to K). A producer thread makes its own pool,
`pool = producer_pool(SHARDS)`, and calls `pool.put_job(body)`; a worker
thread calls `work(SHARDS, handle, running)`, SHARDS being
[(host, port), ...]. A job is deleted exactly once, but may be worked
twice after a restart: make `handle` idempotent.

tests/recipe_pystalk.rs runs this file as it is, through a SIGKILL and a
restart of one server and the retirement of another.
"""

import select
import socket

from pystalk import BeanstalkClient, ProductionPool


def producer_pool(shards):
    """A pool over `shards`, [(host, port), ...]: one per producer thread."""
    # socket_timeout: a server that stops answering fails the put (and the
    # pool moves on) instead of hanging it. backoff_time: how long a server
    # that failed is skipped; pystalk's default of 10 s keeps a restarted
    # server out of the pool that long.
    clients = [BeanstalkClient(host, port, socket_timeout=5) for host, port in shards]
    return ProductionPool(clients, round_robin=True, backoff_time=1)


class Shard:
    """A worker's connection to one server; reconnected when lost."""

    def __init__(self, addr):
        self.addr, self.sock, self.reader, self.waiting = addr, None, None, False

    def fileno(self):
        return self.sock.fileno()

    def connect(self):
        try:
            self.sock = socket.create_connection(self.addr, timeout=5)
        except OSError:
            return False
        self.reader = self.sock.makefile("rb")
        return True

    def close(self):
        if self.sock is not None:
            self.reader.close()
            self.sock.close()
        self.sock, self.reader, self.waiting = None, None, False

    def send(self, line):
        self.sock.sendall(line)

    def reply(self):
        """One reply: its words, and a RESERVED job's body."""
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection lost")
        words = line.split()
        if words[0] != b"RESERVED":
            return words, None
        body = self.reader.read(int(words[2]) + 2)
        if len(body) != int(words[2]) + 2:
            raise ConnectionError("connection lost")
        return words, body[:-2]

    def outcome(self, jobs):
        """Reads a wait's reply; a job it brings is added to `jobs`."""
        self.waiting = False
        try:
            words, body = self.reply()
        except (OSError, ValueError):
            self.close()
            return
        if words[0] == b"RESERVED":
            jobs.append((self, int(words[1]), body))
        # ABORTED: called off. TIMED_OUT: the server is shutting down.


def work(shards, handle, running):
    """Serves jobs from every server in `shards` until running() is false."""
    conns = [Shard(addr) for addr in shards]
    while running():
        for c in conns:
            if c.sock is None and not c.connect():
                continue  # down (restarting, or stopped): tried again in a second
            if not c.waiting:
                try:
                    c.send(b"reserve-with-abort\r\n")
                    c.waiting = True
                except OSError:
                    c.close()
        # Waits sent nothing more: an idle worker costs no server anything.
        # The timeout only retries servers that are down. (Every reply has
        # been read whole, so the reader's buffer is empty here.)
        waiting = [c for c in conns if c.waiting]
        ready, _, _ = select.select(waiting, [], [], 1.0)
        jobs = []
        for c in ready:
            c.outcome(jobs)
        if not jobs:
            continue
        # Call the other waits off with a bare CRLF. Each then answers
        # twice: the wait's outcome, ABORTED or RESERVED (a job handed over
        # before the CRLF arrived: the normal case under load, and this
        # worker's job like any other), then UNKNOWN_COMMAND for the
        # empty line.
        calling_off = [c for c in conns if c.waiting]
        for c in calling_off:
            try:
                c.send(b"\r\n")
            except OSError:
                c.close()
        for c in calling_off:
            if c.sock is not None:
                c.outcome(jobs)
            if c.sock is not None:
                try:
                    c.reply()  # UNKNOWN_COMMAND
                except (OSError, ValueError):
                    c.close()
        for c, job_id, body in jobs:
            handle(body)
            if c.sock is None:
                continue  # its server went away: the job comes back, and is worked twice
            try:
                c.send(b"delete %d\r\n" % job_id)
                c.reply()  # DELETED (NOT_FOUND if its TTR ran out first)
            except (OSError, ValueError):
                c.close()  # as above: the job comes back after a restart
    for c in conns:
        c.close()
