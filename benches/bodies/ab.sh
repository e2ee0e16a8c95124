#!/bin/bash
# Rounds of a loadgen scenario against this build (ours) and the build
# before issue 60 (base), each with SERVER_FLAGS (a -b DIR is made fresh
# for each run when the flags hold -b). One JSON line per run.
# usage: SERVER_FLAGS="-b" ab.sh ROUNDS SCENARIO ARGS...
LG=${LOADGEN:-loadgen}
OURS=${BEANSTALK:-target/release/beanstalk}
WORK=${WORK:-${TMPDIR:-/tmp}}
rounds=$1; shift; scen=$1; shift
port=11750
for r in $(seq 1 $rounds); do
  for who in ours base; do
    port=$((port+1)); d=$WORK/ab-$who; rm -rf $d; mkdir -p $d
    flags=${SERVER_FLAGS//-b/-b $d}
    case $who in
      ours) $OURS -l 127.0.0.1 -p $port $flags & ;;
      base) ${BASE:?the build before, BASE=path} -l 127.0.0.1 -p $port $flags & ;;
    esac
    pid=$!
    sleep 0.3
    out=$(bash -c "ulimit -n 65536; $LG $scen --addr 127.0.0.1:$port --pid $pid $*" 2>/dev/null)
    echo "$who $r $out"
    kill $pid; wait $pid 2>/dev/null; rm -rf $d
  done
done
