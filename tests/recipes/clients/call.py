"""Any line through a beanstalkd client library's own socket: the
extensions (put tags, reserve-batch, list-jobs-*, stats-group, ...) that
no library has a method for, beside the library's own calls on the same
connection. greenstalk_example.py and pystalk_example.py use it; see the
README's "From your client"."""
import os

ADDRESS = ("127.0.0.1", int(os.environ.get("BEANSTALK_PORT", "11300")))


def call(sock, replies, line, body=None):
    """Sends `line` (and a put's `body`) through a library's socket and
    reads the whole reply from `replies`, a buffered reader of that
    socket: the reply line, and the YAML after OK or the (id, body) of
    each job after RESERVED_BATCH."""
    sock.sendall(line.encode() + b"\r\n" + (b"" if body is None else body + b"\r\n"))
    head = replies.readline().decode().rstrip("\r\n")
    word, *args = head.split()
    if word == "OK":
        return head, replies.read(int(args[0]) + 2)[:-2].decode()
    if word == "RESERVED_BATCH":
        jobs = []
        for _ in range(int(args[0])):
            _, job_id, size = replies.readline().split()
            jobs.append((int(job_id), replies.read(int(size) + 2)[:-2]))
        return head, jobs
    return head, None
