#!/usr/bin/env bash
# The users' real paged series on the lent H100 (sm_90), in stages that fit its 10-minute
# calls (docs/evidence/device-h100-real/README.md says what came back).  The call runs in a copy of
# /work/main; it needs .carry/real/ there:
#   parity-real.tgz                 this branch's tree (git archive)
#   llama.cpp-0ed235ea.tar.gz       llama.cpp at the pin (git archive, 33 MB)
#   localai-paged/                  the backend dir: Makefile + patches/paged
#   gguf-*.whl                      the gguf package (pure Python; not installed there)
# It lays out /tmp/p/{wt,shared} like a checkout beside ../shared, so the profile's
# ${PARITY_ROOT}/../shared paths hold there too.
#   setup        lay out /tmp/p, install gguf
#   build-paged  CUDA build of paged (foreground, timed), then stock in the background
#   ops          op-oracle on CUDA0 for the series' ops (campaign step op-gates)
#   wait-stock   wait for the background stock build
#   gates        md5 paged/nonpaged/stock per model + KL (campaign step md5-gates)
#   sweep        gated serving sweep, paged vs stock, repeats 3 abab (snapshot + report)
#   build-bg     check-series, then the paged and stock builds side by side in the background
#   wait-builds  wait for both background builds (build-<e>.log ends with rc= and wall=)
#   sweep-long   the gated sweep with windows of seconds: GEN (1024) tokens, REPEAT (5) abab,
#                CTX (40960: 32 slots of 1280), then its report
#   collect      copy timings, build.json files and run dirs (tarred) into $OUT
set -uo pipefail
CARRY=${CARRY:-$PWD/.carry/real}
R=/tmp/p
OUT=${OUT:-/tmp/parity-device-out}; mkdir -p "$OUT" "$R/out"
export PARITY_CACHE=$R/cache PYTHONUNBUFFERED=1 GGML_NO_BACKTRACE=1 PARITY_SERIES_TREES=$R/series-trees.yaml
export PYTHONPATH=/tmp/site:$R/wt
PROF=campaigns/profiles/localai-paged-h100.yaml
CAMP=campaigns/localai-paged-h100.yaml
P="python3 -m parity --artifacts $R/runs"
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "[time] $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc: $*" | tee -a "$R/out/timings.txt" >&2; return $rc; }
for stage in "$@"; do
  case $stage in
  setup)
    mkdir -p "$R/wt" "$R/shared/llama.cpp-pin"
    tar xzf "$CARRY/parity-real.tgz" -C "$R/wt"
    cp -r "$CARRY/localai-paged" "$R/shared/"
    ln -sf "$CARRY/llama.cpp-0ed235ea.tar.gz" "$R/shared/llama.cpp-pin/"
    python3 -m pip install -q --no-index --no-deps --target /tmp/site "$CARRY"/gguf-*.whl >/dev/null 2>&1
    cd "$R/wt" && t $P hw -p $PROF | tee "$R/out/hw.txt"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$R/out/hw.txt"
    nvcc --version | tail -2 | tee -a "$R/out/hw.txt"
    ;;
  build-paged)
    cd "$R/wt"
    t $P build -p $PROF --check-series --json > "$R/out/check-series.json" 2> "$R/out/check-series.err"
    t $P build -p $PROF -e paged -j 16 2>&1 | tail -5 | tee "$R/out/build-paged.log"
    setsid nohup bash -c "cd $R/wt && s=\$(date +%s); $P build -p $PROF -e stock -j 16 > $R/out/build-stock.log 2>&1; echo rc=\$? wall=\$(( \$(date +%s) - s ))s >> $R/out/build-stock.log; touch $R/stock.done" < /dev/null > /dev/null 2>&1 &
    ;;
  ops)
    cd "$R/wt" && t $P campaign run $CAMP --only op-gates 2>&1 | tail -15
    ;;
  wait-stock)
    while [ ! -e $R/stock.done ]; do sleep 5; done; tail -3 $R/out/build-stock.log
    ;;
  gates)
    cd "$R/wt" && t $P campaign run $CAMP --only synth --only md5-gates 2>&1 | tail -25
    ;;
  sweep)
    cd "$R/wt" && t $P campaign run $CAMP --only snapshot --only report 2>&1 | tail -30
    ;;
  build-bg)
    cd "$R/wt"
    t $P build -p $PROF --check-series --json > "$R/out/check-series.json" 2> "$R/out/check-series.err"
    for e in paged stock; do
      setsid nohup bash -c "cd $R/wt && s=\$(date +%s); $P build -p $PROF -e $e -j 16 > $R/out/build-$e.log 2>&1; echo rc=\$? wall=\$(( \$(date +%s) - s ))s >> $R/out/build-$e.log; touch $R/$e.done" < /dev/null > /dev/null 2>&1 &
    done
    ;;
  wait-builds)
    while [ ! -e $R/paged.done ] || [ ! -e $R/stock.done ]; do sleep 5; done
    tail -n 2 $R/out/build-paged.log $R/out/build-stock.log
    ;;
  sweep-long)
    cd "$R/wt" && t $P campaign run $CAMP --only synth 2>&1 | tail -5
    t $P snapshot -p $PROF --gen "${GEN:-1024}" --ctx "${CTX:-40960}" --repeat "${REPEAT:-5}" --json > "$R/out/sweep-long.json" 2> "$R/out/sweep-long.err"
    tail -n 25 "$R/out/sweep-long.err"
    run=$(ls -td "$R"/runs/*/ | head -1)  # the newest run dir: a snapshot stopped before its summary prints no JSON
    t $P report "$run" --title "paged vs stock on H100, gen ${GEN:-1024}, ${REPEAT:-5} repeats" --out-dir "$R/reports" 2>&1 | tail -5
    cp "$run"/summary.tsv "$R/out/sweep-long-summary.tsv" 2>/dev/null
    cp "$R"/reports/*.md "$R/out/" 2>/dev/null
    ;;
  collect)
    for e in paged stock; do
      d=$(cd $R/wt && $P build -p $PROF -e $e --print-cmake --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["dir"])')
      [ -e "$d/build.json" ] && cp "$d/build.json" "$R/out/build-$e.json"
    done
    (cd $R && tar czf "$OUT/runs.tgz" runs 2>/dev/null)
    (cd $R/out && tar czf "$OUT/out.tgz" .)
    cp $R/out/timings.txt "$OUT/" 2>/dev/null
    ;;
  esac
done
