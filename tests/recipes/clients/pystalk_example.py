"""pystalk 0.9: it connects on first use and reads its socket unbuffered,
so a reader of your own over `_socket` is safe (make a new one should
pystalk reconnect)."""
import pystalk

from call import ADDRESS, call

client = pystalk.BeanstalkClient(*ADDRESS)
client.use("photos")
client.watch("photos")
sock = client._socket
replies = sock.makefile("rb")

body = b"resize 42.jpg"
print(call(sock, replies, f"put 0 0 60 {len(body)} idp:resize-42 grp:album-7 max:3", body)[0])
print(call(sock, replies, "stats-group album-7")[1])
head, jobs = call(sock, replies, "reserve-batch 10")
print(head)
for job_id, job_body in jobs:
    client.bury_job(job_id)
print(call(sock, replies, "list-jobs-buried")[1])
client.close()
