#!/bin/bash
# RSS of COUNT jobs of BODY bytes, filled with loadgen, on a server started
# with the given flags; then a restart of the same directory: its time to
# listen, and its RSS and VmHWM once replayed.
# usage: rss.sh NAME COUNT BODY SERVER-FLAGS...
LG=${LOADGEN:-loadgen}
OURS=${BEANSTALK:-target/release/beanstalk}
WORK=${WORK:-${TMPDIR:-/tmp}}
name=$1; count=$2; body=$3; shift 3
dir=$WORK/dir-$name; rm -rf $dir; mkdir -p $dir
port=$((11800 + RANDOM % 100))
case $1 in
  beanstalkd) shift; bd=1; /usr/bin/beanstalkd -l 127.0.0.1 -p $port "$@" & ;;
  *) $OURS -l 127.0.0.1 -p $port -b $dir "$@" & ;;
esac
pid=$!; sleep 0.3
out=$($LG fill --addr 127.0.0.1:$port --pid $pid --count $count --body $body)
echo "$name fill $out"
kill -9 $pid; wait $pid 2>/dev/null
[ -n "$bd" ] && exit 0
for flags in "$*" "$* --bodies-in-memory all" "$*" "$* --bodies-in-memory all"; do
  start=$(date +%s.%N)
  $OURS -l 127.0.0.1 -p $port -b $dir $flags & pid=$!
  python3 -c "
import socket,time
while True:
    try:
        s=socket.create_connection(('127.0.0.1',$port)); s.sendall(b'list-tube-used\r\n'); s.recv(100); break
    except OSError: time.sleep(0.02)
"
  end=$(date +%s.%N)
  rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status); hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
  echo "$name restart flags=[$flags] secs=$(echo "$end - $start" | bc) rss_kib=$rss hwm_kib=$hwm"
  kill -9 $pid; wait $pid 2>/dev/null
done
rm -rf $dir
