#!/bin/bash
# Rounds of a loadgen scenario against: ours with -b and bodies in the log
# (ours), ours with -b and every body in memory (all), beanstalkd with -b
# (beanstalkd). One JSON line per run.
# usage: cycle.sh ROUNDS SCENARIO ARGS...
LG=${LOADGEN:-loadgen}
OURS=${BEANSTALK:-target/release/beanstalk}
WORK=${WORK:-${TMPDIR:-/tmp}}
rounds=$1; shift; scen=$1; shift
port=11650
for r in $(seq 1 $rounds); do
  for who in ours all beanstalkd; do
    port=$((port+1)); d=$WORK/cyc-$who; rm -rf $d; mkdir -p $d
    case $who in
      ours) $OURS -l 127.0.0.1 -p $port -b $d & ;;
      all) $OURS -l 127.0.0.1 -p $port -b $d --bodies-in-memory all & ;;
      beanstalkd) /usr/bin/beanstalkd -l 127.0.0.1 -p $port -b $d & ;;
    esac
    pid=$!
    sleep 0.3
    out=$(bash -c "ulimit -n 65536; $LG $scen --addr 127.0.0.1:$port --pid $pid $*" 2>/dev/null)
    echo "$who $r $out"
    kill $pid; wait $pid 2>/dev/null; rm -rf $d
  done
done
