#!/bin/bash
# Usage: run.sh LABEL [serve args...]: starts a broker, runs the acks scenario against it.
set -e
label=$1; shift
bin=${HEADWAY_BIN:-target/release/headway}
dir=$(mktemp -d)  # the broker's scratch data directory
$bin serve --listen 127.0.0.1:0 --data-dir $dir "$@" > $dir/out.log 2>&1 &
pid=$!
for i in $(seq 100); do addr=$(grep -o "headway listening on [0-9.:]*" $dir/out.log | awk '{print $4}'); [ -n "$addr" ] && break; sleep 0.1; done
$bin bench acks --bootstrap $addr --broker-pid $pid --label $label --out ${OUT:-bench/results/acl} \
  --duration 30 --producers 1 --sizes 100 --acks 1 --beside-writer false --rate 200000 2>&1 | tail -3
kill $pid; wait $pid || true
rm -rf "$dir"
