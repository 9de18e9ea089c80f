#!/usr/bin/env bash
# make_nights.sh DIR FIRST LAST [PROFILE]: nights FIRST..LAST of campaigns/nightly-cpu.yaml, one
# after the other, into the artifacts dir DIR with its history store DIR/history.duckdb; each
# night's output in DIR/night-N.log, its exit code in DIR/nights.txt.  Run from the repo root.
# The runs take SCHED_FIFO priority 10 (chrt -f 10): on the shared 2-core box the paired block
# ratios of llama-batched-bench spread 14 % per block at normal priority beside other jobs, 2-6 %
# with it (each arm is single-threaded and runs < 0.5 s at a time, under the kernel's RT
# throttle of 95 %).
set -u
dir=$1; first=$2; last=$3; profile=${4:-campaigns/profiles/history-cpu.yaml}
mkdir -p "$dir"
for n in $(seq "$first" "$last"); do
  PARITY_HISTORY="$dir/history.duckdb" chrt -f 10 .venv/bin/parity --artifacts "$dir" campaign run campaigns/nightly-cpu.yaml --profile "$profile" > "$dir/night-$n.log" 2>&1
  echo "night $n: exit $? ($profile)" >> "$dir/nights.txt"
done
