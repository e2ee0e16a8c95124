"""greenstalk 2: its socket and its buffered reader are `_sock` and `_reader`."""
import greenstalk

from call import ADDRESS, call

client = greenstalk.Client(ADDRESS, use="photos", watch="photos")
sock, replies = client._sock, client._reader

body = b"resize 42.jpg"
print(call(sock, replies, f"put 0 0 60 {len(body)} idp:resize-42 grp:album-7 max:3", body)[0])
print(call(sock, replies, "stats-group album-7")[1])
head, jobs = call(sock, replies, "reserve-batch 10")
print(head)
for job_id, job_body in jobs:
    client.bury(greenstalk.Job(job_id, job_body))
print(call(sock, replies, "list-jobs-buried")[1])
client.close()
