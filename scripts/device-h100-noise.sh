#!/usr/bin/env bash
# Noise on the lent H100: against model size, an A/A of one stock build, and the
# series' runtime lever LLAMA_MOE_NO_FORCE_GRAPHS=1, all with the paired statistics
# (campaigns/profiles/h100-noise.yaml; docs/evidence/device-h100-noise/README.md says what came back).
# The call runs in a copy of this checkout; it needs, git-ignored and carried:
#   .carry/real/llama.cpp-0ed235ea.tar.gz   the pin (git archive, 33 MB)
#   .carry/real/localai-paged/              the backend dir: Makefile + patches/paged
#   .whl/                                   gguf, nvidia-ml-py (not installed there)
# Stages (each call names some; a stage that needs an earlier one's files checks for them):
#   setup      lay out /tmp/p/{wt,shared} (wt = this checkout, copied again at every call)
#   build-bg   check-series, then paged and stock built side by side in the background
#   synth-bg   the profile's models synthesized in the background (1, 4, 16 GB dense; the MoE)
#   progress   wait up to WAIT_S seconds for them, a line a minute
#   wait       wait for the builds and models; quantize the MoE to Q8_0 (stock's llama-quantize)
#   noise      batched-bench A/A (stock vs stock_b) at 1, 4 and 16 GB, REPEAT blocks each
#   aa         serving A/A, stock vs stock_b, N 1/8/32 on MODEL, --until-ci CI
#   canary     serving A/A of REPEAT (16) fixed blocks: the drift canary's flagged blocks, the intervals with and without them;
#              HOG="B:N ..." starves the host with N busy loops during block B
#   lever      paged vs paged_nofg on moe-big-q8: batched-bench and serving, --until-ci CI
#   aa-sizes   serving A/A at SIZES (dense-1g dense-4g), REPEAT fixed blocks
#   paged-stock  paged vs stock on gpu-qwen35moe: bench A/B, gated serving sweep, parity gap
#   ab-runtime / ab-build / levers   parity ab on a runtime and a build lever, the map
#   ttft / ttft-ab   issue 54 on PROF=campaigns/profiles/h200-ttft.yaml: the TTFT anatomy at N 1/8/32, the
#              setting it names as a --server-arg lever (SERVER_ARG) until TTFT's interval is +-5 %
#   aa-ttft    the A/A of PROF's setting at N=1 until TTFT's interval is +-5 % (stock_b, stock; TAG names the outputs)
#   capacity-aa / capacity-knob  parity capacity: stock_b vs stock, then stock_nog (CUDA graphs off) vs stock (issue 57)
#   xover-aa / xover-knob  two GPUs at once (--gpus 0,1): stock_b vs stock, then KNOB (stock_nkvo) vs stock, NPL, --until-ci XCI
#              XGEN: the generation length of xover-aa, xover-knob and knob-1gpu (the profile's, 64, by default)
#   knob-1gpu  the same knob on GPU 0 alone (CUDA_VISIBLE_DEVICES=0), arms in turn, the same target: the wall to compare
#   energy     J/token A/A at N=8 (stock_b, stock) with the counter vs power-integral cross-check (issue 57); EARGS: more options
#   replay-aa  a request-trace slice (TRACE, SPEEDUP, DUR s) replayed A/A in paired blocks (issue 58); replay-ps: paged vs stock;
#              RUNTIL=request_ttft_median=2,...: blocks until those request-paired intervals are narrow (at most RMAX, 16);
#              RGPUS=0,1: in crossover on a two-GPU host (both arms at once); RARGS: more snapshot options (--budget-s S)
#   energy-bg  NVML energy counter + power samples for ENERGY_S s in the background (nvml-energy-capture.py)
#   ab-ops / ab-env  a runtime lever of the stock build (OPS_ENV, ENV_LEVER) by focused op timing and
#              by batched-bench, with engagement proof; and a misspelt env (NOT ENGAGED)
#   collect    everything small into $OUT
#   chain-bg   PLAN's lines (a file of "VAR=value ... stage ..." lines) run one after another in the background
#              from a frozen copy of this checkout ($R/chain), so the GPU works
#              between calls and a later call's copy cannot change the code under it
#   poll       wait up to WAIT_S seconds for the chain (a line a minute, never past WAIT_S), then collect;
#              the per-block lines are copied to $OUT every minute, so a call cut off still brings them back;
#              give the call WAIT_S + 60 s at least (the runs tarball)
# Another profile: PROF=... ENGINES="paged paged_wo0011" MODELS="dense-16g moe-big" QUANT_ENGINE=paged
set -uo pipefail
SRC=$PWD
CARRY=${CARRY:-$SRC/.carry/real}
R=/tmp/p
OUT=${OUT:-/tmp/parity-device-out}; mkdir -p "$OUT" "$R/out"
export PARITY_CACHE=$R/cache PYTHONUNBUFFERED=1 GGML_NO_BACKTRACE=1 PARITY_SERIES_TREES=$R/series-trees.yaml
WT=${WT:-$R/wt}  # the chain runs from its own frozen copy (WT=$R/chain NOCOPY=1)
export PYTHONPATH=/tmp/site:$WT
PROF=${PROF:-campaigns/profiles/h100-noise.yaml}
ENGINES=${ENGINES:-paged stock}  # built by build-bg; QUANT_ENGINE's llama-quantize makes moe-big-q8
P="python3 -m parity --artifacts $R/runs"
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "[time] $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc: $*" | tee -a "$R/out/timings.txt" >&2; return $rc; }
need() { for f in "$@"; do [ -e "$f" ] || { echo "MISSING $f: this is a fresh machine, run the earlier stages first"; exit 3; }; done; }
nap() { local left=$(( $1 - $(date +%s) )); [ $left -gt 0 ] && sleep $(( left < 60 ? left : 60 )); }  # a minute, never past $1 (WAIT_S is a bound)
bg() { local name=$1; shift; setsid nohup bash -c "cd $WT && s=\$(date +%s); $* > $R/out/$name.log 2>&1; echo rc=\$? wall=\$(( \$(date +%s) - s ))s >> $R/out/$name.log; touch $R/$name.done" < /dev/null > /dev/null 2>&1 & }
# this call's checkout, always (the code may have changed since the last call)
# (or $CARRY/parity.tgz, a `git archive` of one commit, when carried: the same code in every call)
if [ "${NOCOPY:-0}" = 1 ]; then :
elif [ -e "$CARRY/parity.tgz" ]; then rm -rf "$WT" && mkdir -p "$WT" && tar xzf "$CARRY/parity.tgz" -C "$WT"
else mkdir -p "$WT" && (cd "$SRC" && tar cf - --exclude=./.carry --exclude=./.whl --exclude=./.git .) | (cd "$WT" && tar xf -); fi
cd "$WT"
for stage in "$@"; do
  case $stage in
  setup)
    mkdir -p "$R/shared/llama.cpp-pin"
    cp -r "$CARRY/localai-paged" "$R/shared/"
    # a copy, not a link: between two calls the carried checkout is replaced, and a chain running then lost it
    rm -f "$R/shared/llama.cpp-pin/llama.cpp-0ed235ea.tar.gz" && cp "$CARRY/llama.cpp-0ed235ea.tar.gz" "$R/shared/llama.cpp-pin/"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/.whl/*.whl > /dev/null 2>&1
    python3 -c "import scipy, pynvml, gguf; print('scipy', scipy.__version__, 'pynvml ok, gguf ok')"
    t $P hw -p $PROF | tee "$R/out/hw.txt"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv | tee -a "$R/out/hw.txt"
    nproc | tee -a "$R/out/hw.txt"
    ;;
  build-bg)
    t $P build -p $PROF --check-series --json > "$R/out/check-series.json" 2> "$R/out/check-series.err"
    for e in $ENGINES; do bg build-$e "$P build -p $PROF -e $e -j ${JOBS:-16}"; done
    ;;
  synth-bg)
    for m in ${MODELS:-dense-1g dense-4g dense-16g moe-big}; do
      bg synth-$m "python3 -c \"from parity.config import load_profile; from parity.models.synth import ensure_model; print(ensure_model(load_profile('$PROF'), '$m'))\""
    done
    ;;
  progress)  # wait up to WAIT_S (default 500) seconds for the background work, a line a minute
    end=$(( $(date +%s) + ${WAIT_S:-500} ))
    while [ $(date +%s) -lt $end ]; do
      left=0; line=""
      for f in $(for e in $ENGINES; do echo build-$e; done) $(for m in ${MODELS:-dense-1g dense-4g dense-16g moe-big}; do echo synth-$m; done); do
        [ -e $R/$f.done ] && continue; left=$((left + 1))
        line="$line $f:$(grep -o '\[[0-9]*/[0-9]*\]' $R/out/$f.log 2>/dev/null | tail -1)"
      done
      echo "$(date +%T) waiting for $left:$line"; [ $left -eq 0 ] && break; nap $end
    done
    ;;
  wait)
    for f in $(for e in $ENGINES; do echo build-$e; done) $(for m in ${MODELS:-dense-1g dense-4g dense-16g moe-big}; do echo synth-$m; done); do
      while [ ! -e $R/$f.done ]; do sleep 5; [ -e $R/out/$f.log ] || { echo "MISSING $f: not started on this machine"; exit 3; }; done
      tail -n 1 $R/out/$f.log
    done
    q=$($P build -p $PROF -e ${QUANT_ENGINE:-stock} --print-cmake --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["dir"])')/build/bin/llama-quantize
    [ -e $PARITY_CACHE/models/moe-big-q8_0.gguf ] || [ ! -e $PARITY_CACHE/models/moe-big-f16.gguf ] || t $q $PARITY_CACHE/models/moe-big-f16.gguf $PARITY_CACHE/models/moe-big-q8_0.gguf Q8_0 16 > $R/out/quantize.log 2>&1
    tail -n 3 $R/out/quantize.log; ls -la $PARITY_CACHE/models/
    ;;
  noise)
    for m in dense-1g dense-4g dense-16g; do
      t $P bench -p $PROF --engines stock_b,stock -m $m --repeat ${REPEAT:-5} --json > $R/out/noise-bench-$m.json 2> $R/out/noise-bench-$m.err
      tail -n 8 $R/out/noise-bench-$m.err
    done
    ;;
  aa)
    t $P snapshot -p $PROF --engines stock_b,stock -m ${MODEL:-dense-16g} --npl 1,8,32 --until-ci ${CI:-3} --max-repeats ${MAXREP:-12} --budget-s ${BUDGET:-420} --no-gates --json > $R/out/aa.json 2> $R/out/aa.err
    tail -n 30 $R/out/aa.err
    ;;
  canary)  # the drift canary on a serving A/A of REPEAT fixed blocks: the blocks it flags, and each interval with and without them
    # HOG="3:16 7:32": N busy-looping processes (this host's CPU taken away, as a VM's stolen vCPUs) from the
    # end of block B-1 to the end of block B, so the canary's flags can be checked against known disturbed blocks
    : > $R/out/canary.err; : > $R/out/hog.txt
    t $P snapshot -p $PROF --engines stock_b,stock -m ${MODEL:-dense-16g} --npl ${NPL:-1,8,32} --repeat ${REPEAT:-16} --no-gates --json > $R/out/canary.json 2> $R/out/canary.err &
    snap=$!
    for spec in ${HOG:-}; do
      b=${spec%:*}; n=${spec#*:}
      until grep -q "^block $((b - 1)) done" $R/out/canary.err; do kill -0 $snap 2> /dev/null || break 2; sleep 0.2; done
      pids=""; for i in $(seq $n); do (while :; do :; done) & pids="$pids $!"; done
      echo "$(date +%T.%N) block $b: $n busy loops on $(nproc) cores" | tee -a $R/out/hog.txt
      until grep -q "^block $b done" $R/out/canary.err; do kill -0 $snap 2> /dev/null || break; sleep 0.2; done
      kill $pids; echo "$(date +%T.%N) block $b: busy loops stopped" | tee -a $R/out/hog.txt
    done
    wait $snap
    grep "drift canary" $R/out/canary.err
    python3 -c "import json, sys; from parity.stats.canary import with_and_without; from parity.metrics.registry import direction; d = json.load(open(sys.argv[1])); s = json.load(open(d['run_dir'] + '/summary.json')); print(json.dumps({'canary': {k: s['canary'][k] for k in ('median_ms', 'mad_pct', 'threshold_pct', 'flagged', 'overhead_ms_per_block')}, 'intervals': with_and_without(s, ['decode_agg_tps', 'agg_tps', 'ttft_mean_ms'], direction)}, indent=1))" $R/out/canary.json | tee $R/out/canary-intervals.json
    cp $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $R/out/canary.json)/summary.json $R/out/canary-summary.json
    ;;
  lever)
    t $P bench -p $PROF --engines paged_nofg,paged -m moe-big-q8 --until-ci 2 --max-repeats 8 --budget-s 120 --json > $R/out/lever-bench.json 2> $R/out/lever-bench.err
    tail -n 12 $R/out/lever-bench.err
    t $P snapshot -p $PROF --engines paged_nofg,paged -m moe-big-q8 --npl 1,8,32 --until-ci ${CI:-3} --max-repeats ${MAXREP:-10} --budget-s ${BUDGET:-300} --no-gates --json > $R/out/lever.json 2> $R/out/lever.err
    tail -n 30 $R/out/lever.err
    ;;
  aa-sizes)  # serving A/A at the smaller sizes: REPEAT fixed blocks each
    for m in ${SIZES:-dense-1g dense-4g}; do
      t $P snapshot -p $PROF --engines stock_b,stock -m $m --npl 1,8,32 --repeat ${REPEAT:-4} --no-gates --json > $R/out/aa-$m.json 2> $R/out/aa-$m.err
      tail -n 4 $R/out/aa-$m.err
    done
    ;;
  paged-stock)  # paged vs stock on gpu-qwen35moe, engine alone and serving (gated), then the gap chain
    t $P bench -p $PROF --engines paged,stock -m gpu-qwen35moe --until-ci 2 --max-repeats 8 --budget-s 100 --json > $R/out/ps-bench.json 2> $R/out/ps-bench.err
    tail -n 6 $R/out/ps-bench.err
    t $P snapshot -p $PROF --engines paged,stock -m gpu-qwen35moe --npl 1,8,32 --until-ci 3 --max-repeats 10 --budget-s ${BUDGET:-180} --json > $R/out/ps.json 2> $R/out/ps.err
    tail -n 25 $R/out/ps.err
    s=$(ls -td $R/runs/*_snapshot-gpu-qwen35moe | head -1); b=$(ls -td $R/runs/*_bench-ab | head -1)
    t $P gap "$s" "$b" 2>&1 | tee $R/out/ps-gap.txt
    ;;
  ab-runtime)  # a runtime lever of the series with parity ab (PROF=campaigns/profiles/h100-levers.yaml)
    t $P ab -p $PROF --engine paged --env LLAMA_MOE_NO_FORCE_GRAPHS=1 -m moe-big-q8 --until-ci 2 --max-repeats 8 --budget-s ${BUDGET:-150} --json > $R/out/ab-runtime.json 2> $R/out/ab-runtime.err
    tail -n 25 $R/out/ab-runtime.err
    ;;
  ab-build)  # a build lever (the series without 0011; arm B primed by build-bg as paged_wo0011)
    t $P ab -p $PROF --engine paged --series-without 0011 -m ${MODEL:-dense-16g} --until-ci 2 --max-repeats 8 --budget-s ${BUDGET:-150} ${AB_ARGS:-} --json > $R/out/ab-build.json 2> $R/out/ab-build.err
    tail -n 25 $R/out/ab-build.err
    ;;
  levers)
    $P levers -p $PROF --markdown | tee $R/out/levers.md
    ;;
  ttft)  # issue 54: where TTFT goes at N 1/8/32 on MODEL (PROF=campaigns/profiles/h200-ttft.yaml)
    t $P snapshot -p $PROF --engines stock -m ${MODEL:-dense-16g} --npl ${NPL:-1,8,32} --repeat ${REPEAT:-3} --no-gates --json > $R/out/ttft.json 2> $R/out/ttft.err
    tail -n 30 $R/out/ttft.err
    cp $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $R/out/ttft.json)/summary.json $R/out/ttft-summary.json
    ;;
  ttft-ab)  # the setting the anatomy names, as a server-arg lever, until TTFT's interval is +-5 % at N=1
    t $P ab -p $PROF -e stock --server-arg "${SERVER_ARG:---cache-ram 0}" --serving -m ${MODEL:-dense-16g} --npl ${NPL:-1} --until-ci ttft_mean_ms=5 --max-repeats ${MAXREP:-10} --json > $R/out/ttft-ab.json 2> $R/out/ttft-ab.err
    tail -n 30 $R/out/ttft-ab.err
    ;;
  aa-ttft)  # the A/A of PROF's setting at N=1, until TTFT's interval is +-5 % (TAG names its outputs: aa-ttft-TAG.*)
    o=$R/out/aa-ttft${TAG:+-$TAG}
    t $P snapshot -p $PROF --engines stock_b,stock -m ${MODEL:-dense-16g} --npl ${NPL:-1} --until-ci ttft_mean_ms=5 --max-repeats ${MAXREP:-10} --no-gates --json > $o.json 2> $o.err
    tail -n 30 $o.err
    cp $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $o.json)/summary.json $o-summary.json
    ;;
  energy-bg)  # NVML energy counter and power side by side for ENERGY_S seconds, beside whatever runs next (issue 57's test data)
    setsid nohup python3 $R/wt/scripts/nvml-energy-capture.py $R/out/nvml-energy-h200.json ${ENERGY_S:-120} 0.1 > $R/out/energy.log 2>&1 < /dev/null &
    ;;
  energy)  # issue 57: J per token of one build against itself at N (NVML counter, cross-checked against the power integral)
    t $P snapshot -p $PROF --engines stock_b,stock -m ${MODEL:-dense-16g} --npl ${NPL:-8} --repeat ${REPEAT:-4} ${EARGS:-} --no-gates --json > $R/out/energy.json 2> $R/out/energy.err
    tail -n 16 $R/out/energy.err
    d=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $R/out/energy.json)
    cp $d/summary.json $R/out/energy-summary.json; cp $(ls $d/telemetry/*.json | head -1) $R/out/energy-telemetry-point.json
    ;;
  replay-aa | replay-ps)  # issue 58: one request-trace slice replayed in paired blocks: on one build twice (replay-aa:
    # stock_b, stock), or paged vs stock (replay-ps); PROF=campaigns/profiles/h200-replay.yaml turns the host prompt cache off
    eng=$([ $stage = replay-aa ] && echo stock_b,stock || echo paged,stock)
    t $P snapshot -p $PROF --engines ${RENGINES:-$eng} -m ${MODEL:-dense-16g} --parallel ${RPAR:-16} --ctx ${RCTX:-131072} --trace tests/data/replay/${TRACE:-azure-conv-2023.csv} --workload-opt "speedups=[${SPEEDUP:-1}]" --workload-opt duration_s=${DUR:-20} --repeat ${REPEAT:-3} ${RUNTIL:+--until-ci $RUNTIL --max-repeats ${RMAX:-16}} ${RGPUS:+--gpus $RGPUS} ${RARGS:-} --no-gates --json > $R/out/$stage.json 2> $R/out/$stage.err
    grep -v "^[│┃┏┡└]" $R/out/$stage.err | tail -n 24
    d=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $R/out/$stage.json); cp $d/summary.json $R/out/$stage-summary.json
    ;;
  capacity-aa | capacity-knob)  # issue 57: capacity at SLA, one build against itself, then with CUDA graphs off (stock_nog)
    arm=$([ $stage = capacity-aa ] && echo stock_b || echo ${KNOB:-stock_nog})  # CENGINES=stock_b,stock_nog,stock: both in one run
    t env ${CVIS:+CUDA_VISIBLE_DEVICES=$CVIS} $P capacity -p $PROF --engines ${CENGINES:-$arm,stock} -m ${MODEL:-dense-16g} --slo ${SLO:-itl_p99_ms=12,ttft_p99_ms=1000} --parallel ${CPAR:-64} --gen ${CGEN:-64} --requests ${CREQ:-80} --repeat ${CREP:-4} ${CARGS:-} --no-gates --json > $R/out/$stage.json 2> $R/out/$stage.err
    tail -n 24 $R/out/$stage.err
    d=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $R/out/$stage.json); cp $d/capacity.json $R/out/$stage-capacity.json
    ;;
  xover-aa | xover-knob)  # issue 57 on two GPUs: a block's two arms at once on GPU 0 and 1, swapped every block
    eng=$([ $stage = xover-aa ] && echo stock_b,stock || echo ${KNOB:-stock_nkvo},stock); o=$R/out/$stage
    t $P snapshot -p $PROF --engines $eng -m ${MODEL:-dense-16g} --npl ${NPL:-8,32} ${XGEN:+--gen $XGEN} --gpus 0,1 --until-ci ${XCI:-1} --max-repeats ${MAXREP:-8} --no-gates --json > $o.json 2> $o.err
    grep -v "^[│┃┏┡└]" $o.err | tail -n 24
    cp $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $o.json)/summary.json $o-summary.json
    ;;
  knob-1gpu)  # the same knob on GPU 0 alone, arms in turn: the single-GPU verdict and its wall for the same target
    o=$R/out/$stage  # CUDA_VISIBLE_DEVICES=0: on a two-GPU host llama-server would otherwise split the model over both
    t env CUDA_VISIBLE_DEVICES=0 $P snapshot -p $PROF --engines ${KNOB:-stock_nkvo},stock -m ${MODEL:-dense-16g} --npl ${NPL:-8,32} ${XGEN:+--gen $XGEN} --until-ci ${XCI:-1} --max-repeats ${MAXREP:-8} --no-gates --json > $o.json 2> $o.err
    grep -v "^[│┃┏┡└]" $o.err | tail -n 24
    cp $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['run_dir'])" $o.json)/summary.json $o-summary.json
    ;;
  ab-ops)  # focused op timing on a runtime lever of the stock build, with its engagement proof
    t $P ab -p $PROF -e stock --env ${OPS_ENV:-GGML_CUDA_DISABLE_GRAPHS=1} --ops ${OPS:-MUL_MAT} --ops-params "${OPS_PARAMS:-type_a=f16,type_b=f32,m=4096,n=(1|8),k=14336}" --repeat ${REPEAT:-3} --json > $R/out/ab-ops.json 2> $R/out/ab-ops.err
    tail -n 25 $R/out/ab-ops.err
    ;;
  ab-env)  # the same env lever on batched-bench, and a misspelt one (NOT ENGAGED, exit 8, before the lock)
    t $P ab -p $PROF -e stock --env ${ENV_LEVER:-GGML_CUDA_DISABLE_GRAPHS=1} -m ${MODEL:-dense-16g} --repeat ${REPEAT:-3} --json > $R/out/ab-env.json 2> $R/out/ab-env.err
    tail -n 25 $R/out/ab-env.err
    t $P ab -p $PROF -e stock --env GGML_CUDA_DISABLE_GRAPH=1 -m ${MODEL:-dense-16g} --repeat 2 > $R/out/ab-typo.out 2> $R/out/ab-typo.err
    tail -n 6 $R/out/ab-typo.err
    ;;
  chain-bg)
    need "$WT/${PLAN:?PLAN=a plan file}"
    rm -rf $R/chain && cp -a "$WT" $R/chain && rm -f $R/chain.done
    setsid nohup env WT=$R/chain NOCOPY=1 PLAN=$PLAN bash $R/chain/scripts/device-h100-noise.sh chain-run < /dev/null > $R/out/chain.log 2>&1 &
    echo "chain started: $(grep -cv '^#' $WT/$PLAN) lines of $PLAN"
    ;;
  chain-run)  # chain-bg's background half
    while read -r line; do
      case $line in ''|'#'*) continue;; esac
      echo "$(date +%T) chain: $line"; (eval "$line") < /dev/null; echo "$(date +%T) chain: rc=$?"
    done < "$PLAN"
    touch $R/chain.done
    ;;
  poll)
    end=$(( $(date +%s) + ${WAIT_S:-500} ))
    while [ ! -e $R/chain.done ] && [ $(date +%s) -lt $end ]; do
      [ -e $R/out/chain.log ] || { echo "MISSING chain: not started on this machine"; exit 3; }
      echo "$(date +%T) $(grep ' chain: ' $R/out/chain.log | tail -1)"
      cp $R/out/*.err $R/out/chain.log "$OUT/" 2>/dev/null  # so a call the device cuts off still brings back the per-block lines
      nap $end
    done
    grep -v "^[│┃┏┡└]" $R/out/chain.log | tail -n 60
    (cd $R && tar czf "$OUT/runs.tgz" --exclude='*.gguf' --exclude='*.log' runs out 2>/dev/null)
    cp $R/out/*.err $R/out/*-summary.json $R/out/*-capacity.json $R/out/timings.txt $R/out/chain.log "$OUT/" 2>/dev/null
    ;;
  collect)
    (cd $R && tar czf "$OUT/runs.tgz" --exclude='*.gguf' --exclude='*.log' runs out 2>/dev/null)
    cp $R/out/*.err $R/out/*-summary.json $R/out/*-capacity.json $R/out/energy-telemetry-point.json "$OUT/" 2>/dev/null
    cp $R/out/timings.txt "$OUT/" 2>/dev/null
    ;;
  esac
done
