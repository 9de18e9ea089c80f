#!/usr/bin/env bash
# Kernel traces on the lent H100 with parity's CUPTI tracer (no nsys there), in stages that each fit
# one 10-minute call (docs/cupti.md says what they measure).  The call runs in a copy of this checkout;
# it needs, git-ignored and carried:
#   .carry/real/llama.cpp-0ed235ea.tar.gz   the pin (git archive, 33 MB)
#   .carry/real/localai-paged/              the backend dir: Makefile + patches/paged
#   .whl/                                   gguf, nvidia-ml-py, nvidia-cuda-cupti==13.0.85 (the driver's CUDA 13.0;
#                                           the toolkit there has no extras/CUPTI)
# Stages (a stage that needs an earlier one's files checks for them: a fresh machine says MISSING, exit 3):
#   setup      lay out /tmp/p/{wt,shared}, install the wheels, hw, build the CUPTI tracer (seconds)
#   build-bg   paged and stock (sm_90; llama-server, llama-batched-bench, + llama-quantize for stock) in the background
#   synth-bg   dense-16g and moe-big synthesized in the background
#   progress   wait up to WAIT_S (default 480) seconds for them, a line a minute
#   wait       wait for builds and models; quantize moe-big to Q8_0 (stock's llama-quantize)
#   testdata   the tracer alone in paged llama-batched-bench on dense-16g (ntg 32 and 8, npl 8): the files
#              tests/data/profile/cupti/ wants, and a first proof that the library loads and flushes
#   trace      parity profile --tracer cupti --engines paged,stock on dense-16g and on moe-big-q8
#              (3 blocks: tracer cost per arm, node-count check per launch, difference, paired buckets)
#   lever      the MoE lever of patch 0043 (paged_nofg = LLAMA_MOE_NO_FORCE_GRAPHS=1 vs paged) at npl 32:
#              traced paired buckets, the untraced bench A/B and a serving A/B at N=32, then parity gap --kernels
#   collect    everything small into $OUT: cupti-data.tgz (the test data), runs.tgz, out.txt, timings.txt
#   selftest   on its own (no llama.cpp, no models; about a minute on a fresh machine): the wheels, the tracer,
#              scripts/cupti-graph-selftest.cu built with nvcc (100 kernels x 5000 graph launches), run untraced and
#              traced (8 MB and 2 MB buffers: CUPTI hands many back while graphs are launched); parity reads each trace:
#              every launch must run its graph's kernel nodes, no launch or record lost; out.txt in $OUT
# Suggested calls (each under 10 min):  1) setup build-bg synth-bg progress   2) wait testdata trace
#   3) lever collect   (if call 1 ends before the builds, start call 2 with `progress` again).
set -uo pipefail
SRC=$PWD
CARRY=${CARRY:-$SRC/.carry/real}
R=/tmp/p
OUT=${OUT:-/tmp/parity-device-out}; mkdir -p "$OUT" "$R/out"
export PARITY_CACHE=$R/cache PYTHONUNBUFFERED=1 GGML_NO_BACKTRACE=1 PARITY_SERIES_TREES=$R/series-trees.yaml
export PYTHONPATH=/tmp/site:$R/wt
PROF=${PROF:-campaigns/profiles/h100-cupti.yaml}
ENGINES="paged stock"
MODELS="dense-16g moe-big"
P="python3 -m parity --artifacts $R/runs"
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "[time] $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc: $*" | tee -a "$R/out/timings.txt" >&2; return $rc; }
need() { for f in "$@"; do [ -e "$f" ] || { echo "MISSING $f: this is a fresh machine, run the earlier stages first"; exit 3; }; done; }
bg() { local name=$1; shift; setsid nohup bash -c "cd $R/wt && s=\$(date +%s); $* > $R/out/$name.log 2>&1; echo rc=\$? wall=\$(( \$(date +%s) - s ))s >> $R/out/$name.log; touch $R/$name.done" < /dev/null > /dev/null 2>&1 & }
bin() { echo "$($P build -p $PROF -e $1 --print-cmake --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["dir"])')/build/bin/$2"; }
tracer_lib() { python3 -c 'from parity.runners.local import LocalRunner as L; from parity.gpu.cuda_device import cuda_device; from parity.tracer.locate import find_cupti; from parity.tracer.build import ensure_built
r = L(); c = find_cupti(cuda_device(r)["cuda"], r); b = ensure_built(r, c); print(b.library); import sys; print("cupti:", c.source, "cached:", b.cached, file=sys.stderr)'; }
newest() { ls -td "$R"/runs/*_"$1"* 2>/dev/null | head -1; }
# this call's checkout, always (the code may have changed since the last call)
mkdir -p "$R/wt" && (cd "$SRC" && tar cf - --exclude=./.carry --exclude=./.whl --exclude=./.git .) | (cd "$R/wt" && tar xf -)
cd "$R/wt"
for stage in "$@"; do
  case $stage in
  setup)
    mkdir -p "$R/shared/llama.cpp-pin"
    need "$CARRY/localai-paged" "$CARRY/llama.cpp-0ed235ea.tar.gz"
    cp -r "$CARRY/localai-paged" "$R/shared/"
    ln -sf "$CARRY/llama.cpp-0ed235ea.tar.gz" "$R/shared/llama.cpp-pin/"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/.whl/*.whl > /dev/null 2>&1
    python3 -c "import scipy, pynvml, gguf; from importlib.metadata import version; print('scipy', scipy.__version__, 'pynvml, gguf ok; nvidia-cuda-cupti', version('nvidia-cuda-cupti'))"
    t $P hw -p $PROF | tee "$R/out/hw.txt"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee -a "$R/out/hw.txt"
    nvidia-smi | grep -o "CUDA Version: [0-9.]*" | tee -a "$R/out/hw.txt"
    ls /usr/local/cuda/extras 2>&1 | head -3 | tee -a "$R/out/hw.txt"
    t tracer_lib | tee "$R/tracer.lib"
    ;;
  build-bg)
    t $P build -p $PROF --check-series --json > "$R/out/check-series.json" 2> "$R/out/check-series.err"
    for e in $ENGINES; do bg build-$e "$P build -p $PROF -e $e -j ${JOBS:-16}"; done
    ;;
  synth-bg)
    for m in $MODELS; do
      bg synth-$m "python3 -c \"from parity.config import load_profile; from parity.models.synth import ensure_model; print(ensure_model(load_profile('$PROF'), '$m'))\""
    done
    ;;
  progress)
    end=$(( $(date +%s) + ${WAIT_S:-480} ))
    while [ $(date +%s) -lt $end ]; do
      left=0; line=""
      for f in $(for e in $ENGINES; do echo build-$e; done) $(for m in $MODELS; do echo synth-$m; done); do
        [ -e $R/$f.done ] && continue
        [ -e $R/out/$f.log ] || { echo "MISSING $f: not started on this machine"; exit 3; }
        left=$((left + 1)); line="$line $f:$(grep -o '\[[0-9]*/[0-9]*\]' $R/out/$f.log 2>/dev/null | tail -1)"
      done
      echo "$(date +%T) waiting for $left:$line"; [ $left -eq 0 ] && break; sleep 60
    done
    ;;
  wait)
    for f in $(for e in $ENGINES; do echo build-$e; done) $(for m in $MODELS; do echo synth-$m; done); do
      while [ ! -e $R/$f.done ]; do sleep 5; [ -e $R/out/$f.log ] || { echo "MISSING $f: not started on this machine"; exit 3; }; done
      tail -n 1 $R/out/$f.log
    done
    q=$(bin stock llama-quantize); need "$q" $PARITY_CACHE/models/moe-big-f16.gguf
    [ -e $PARITY_CACHE/models/moe-big-q8_0.gguf ] || t $q $PARITY_CACHE/models/moe-big-f16.gguf $PARITY_CACHE/models/moe-big-q8_0.gguf Q8_0 16 > $R/out/quantize.log 2>&1
    tail -n 2 $R/out/quantize.log; ls -la $PARITY_CACHE/models/
    ;;
  testdata)  # the library alone, as the tests' data: two captures of paged llama-batched-bench on dense-16g
    b=$(bin paged llama-batched-bench); need "$b" $PARITY_CACHE/models/dense-16g-f16.gguf "$R/tracer.lib"
    lib=$(cat $R/tracer.lib); need "$lib"
    mkdir -p $R/testdata
    for ntg in 32 8; do
      rm -f $R/testdata/paged-dense-ntg$ntg.cupti.*.tsv
      t env LLAMA_KV_PAGED=1 CUDA_INJECTION64_PATH=$lib PARITY_CUPTI_OUT=$R/testdata/paged-dense-ntg$ntg.cupti.%p.tsv \
        $b -m $PARITY_CACHE/models/dense-16g-f16.gguf -c 16384 -ngl 99 -fa on -npp 128 -ntg $ntg -npl 8 > $R/testdata/paged-dense-ntg$ntg.bench.txt 2> $R/testdata/paged-dense-ntg$ntg.stderr.txt
      f=$(ls $R/testdata/paged-dense-ntg$ntg.cupti.*.tsv | head -1); need "$f"
      mv "$f" $R/testdata/paged-dense-ntg$ntg.cupti.tsv; tail -n 5 $R/testdata/paged-dense-ntg$ntg.cupti.tsv; grep "^|" $R/testdata/paged-dense-ntg$ntg.bench.txt | tail -1
    done
    python3 - "$R/testdata" <<'PY' | tee $R/out/testdata-check.txt
import sys, json
from parity.tracer import trace
d = sys.argv[1]
for ntg in (32, 8):
    s = trace.convert([f"{d}/paged-dense-ntg{ntg}.cupti.tsv"], f"{d}/paged-dense-ntg{ntg}.sqlite")
    print(ntg, json.dumps({k: s[k] for k in ("kernels", "graph_node_kernels", "graph_launches_seen", "graph_launches_traced", "node_check", "graph_trace_mode")}))
    print("  problems:", trace.problems(s) or "none"); print("  graphs:", json.dumps(s["graphs"])[:600])
PY
    ;;
  trace)  # paged vs stock, traced in 3 blocks, on the dense 16 GB model and on the Q8_0 MoE
    need $PARITY_CACHE/models/dense-16g-f16.gguf $PARITY_CACHE/models/moe-big-q8_0.gguf "$(bin paged llama-batched-bench)" "$(bin stock llama-batched-bench)"
    for m in dense-16g moe-big-q8; do
      t $P profile -p $PROF --graph-node --tracer cupti --engines paged,stock -m $m --ntg 32,8 --npl ${NPL:-8} --blocks ${BLOCKS:-3} > $R/out/trace-$m.txt 2>&1
      tail -n 60 $R/out/trace-$m.txt
    done
    ;;
  lever)  # patch 0043's MoE lever: forced full-step graphs off (paged_nofg) vs on (paged), npl 32
    need $PARITY_CACHE/models/moe-big-q8_0.gguf "$(bin paged llama-batched-bench)" "$(bin paged llama-server)"
    t $P profile -p $PROF --graph-node --tracer cupti --engines paged_nofg,paged -m moe-big-q8 --ntg 32,8 --npl 32 --blocks ${BLOCKS:-3} > $R/out/lever-trace.txt 2>&1
    tail -n 60 $R/out/lever-trace.txt
    t $P bench -p $PROF --engines paged_nofg,paged -m moe-big-q8 --npl 32 --ntg 128 --repeat ${REPEAT:-4} > $R/out/lever-bench.txt 2>&1; tail -n 8 $R/out/lever-bench.txt
    t $P snapshot -p $PROF --engines paged_nofg,paged -m moe-big-q8 --npl 32 --repeat ${REPEAT:-4} --no-gates > $R/out/lever-serving.txt 2>&1; tail -n 12 $R/out/lever-serving.txt
    s=$(newest snapshot-moe-big-q8); b=$(newest bench-ab); k=$(newest profile-)
    need "$s/summary.json" "$b/bench.json" "$k/profile/paired_buckets.json"
    t $P gap "$s" "$b" --kernels "$k" 2>&1 | tee $R/out/lever-gap.txt
    ;;
  selftest)
    python3 -c "import importlib.metadata as m; m.version('nvidia-cuda-cupti')" 2>/dev/null \
      || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/.whl/*.whl > /dev/null 2>&1
    t tracer_lib | tee "$R/tracer.lib"; lib=$(cat $R/tracer.lib); need "$lib"
    mkdir -p $R/selftest && rm -f $R/selftest/*.tsv
    nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    t $nvcc -O2 -arch=sm_90 -o $R/selftest/graph-selftest scripts/cupti-graph-selftest.cu || exit 3
    { t $R/selftest/graph-selftest 100 5000
      t env CUDA_INJECTION64_PATH=$lib PARITY_CUPTI_OUT=$R/selftest/default.%p.tsv $R/selftest/graph-selftest 100 5000
      t env CUDA_INJECTION64_PATH=$lib PARITY_CUPTI_OUT=$R/selftest/small.%p.tsv PARITY_CUPTI_BUFFER_KB=2048 $R/selftest/graph-selftest 100 5000
      python3 - "$R/selftest" <<'PY'
import glob, json, sys
from parity.tracer import trace
for name in ("default", "small"):
    files = glob.glob(f"{sys.argv[1]}/{name}.*.tsv")
    s = trace.convert(files, f"{sys.argv[1]}/{name}.sqlite")
    p = s["processes"][0]
    print(name, json.dumps({"node_check": {k: v for k, v in s["node_check"].items() if k != "rule"}, "graphs": s["graphs"], "kernels": s["kernels"],
                            "buffers": [p["buffers_requested"], p["buffers_refused"]], "dropped": p["dropped"], "declared": p["declared"], "counted": p["counted"]}))
    print("  problems:", trace.problems(s) or "none")
    ok = s["node_check"]["matched"] == s["node_check"]["launches"] == 5000 and not trace.problems(s)
    print("  PASS" if ok else "  FAIL")
PY
    } 2>&1 | tee $R/out/selftest.txt
    cp $R/out/selftest.txt "$OUT/selftest.txt"; cp $R/out/timings.txt "$OUT/" 2>/dev/null
    ;;
  collect)
    [ -d $R/testdata ] && (cd $R/testdata && gzip -kf *.cupti.tsv && tar czf "$OUT/cupti-data.tgz" *.cupti.tsv.gz *.bench.txt)
    (cd $R && tar czf "$OUT/runs.tgz" --exclude='*.gguf' --exclude='*.sqlite' --exclude='*.tsv.tmp' --exclude='*.cupti.*.tsv' runs out 2>/dev/null)
    cp $R/out/timings.txt "$OUT/" 2>/dev/null
    cat $R/out/hw.txt $R/out/testdata-check.txt $R/out/trace-*.txt $R/out/lever-*.txt 2>/dev/null | grep -v "^\[profile\]" > "$OUT/out.txt"
    ls -la "$OUT"
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
