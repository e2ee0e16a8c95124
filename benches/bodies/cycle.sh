#!/bin/bash
# Rounds of a loadgen scenario against each of SERVERS in turn, one JSON
# line a run. The servers: ours (this build, bodies in the log), all (this
# build, every body in memory), beanstalkd, base (the build before: BASE
# names it). SERVER_FLAGS are given to ours, all and base; "-b" in them
# (and always for ours, all and beanstalkd unless SERVER_FLAGS is set)
# gets a fresh directory a run.
# usage: [SERVERS="ours base"] [SERVER_FLAGS="-b -f 0"] cycle.sh ROUNDS SCENARIO ARGS...
LG=${LOADGEN:-loadgen}
OURS=${BEANSTALK:-target/release/beanstalk}
WORK=${WORK:-${TMPDIR:-/tmp}}
rounds=$1; shift; scen=$1; shift
port=11650
for r in $(seq 1 $rounds); do
  for who in ${SERVERS:-ours all beanstalkd}; do
    port=$((port+1)); d=$WORK/cyc-$who; rm -rf $d; mkdir -p $d
    flags=${SERVER_FLAGS--b}; flags=${flags//-b/-b $d}
    case $who in
      ours) $OURS -l 127.0.0.1 -p $port $flags & ;;
      all) $OURS -l 127.0.0.1 -p $port $flags --bodies-in-memory all & ;;
      base) ${BASE:?the build before: BASE=path} -l 127.0.0.1 -p $port $flags & ;;
      beanstalkd) /usr/bin/beanstalkd -l 127.0.0.1 -p $port -b $d & ;;
    esac
    pid=$!
    sleep 0.3
    out=$(bash -c "ulimit -n 65536; $LG $scen --addr 127.0.0.1:$port --pid $pid $*" 2>/dev/null)
    echo "$who $r $out"
    kill $pid; wait $pid 2>/dev/null; rm -rf $d
  done
done
