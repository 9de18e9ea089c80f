#!/usr/bin/env bash
# How parity was exercised on the lent H100 (sm_90): stage by stage, because the
# machine runs one command for at most 10 minutes.  Needs .carry/ with the pruned
# llama.cpp source (llama-src.tgz) and the gguf wheel; writes results under $OUT.
#   scripts/device-h100.sh build     CUDA build of `paged` + hw + lock wait + the 121a stage (WITH_121A=0 skips it)
#   scripts/device-h100.sh 121a      configure with parity's flags for 121a, compile one ggml-cuda object
#   scripts/device-h100.sh gates     CUDA build of `stock` + md5 / op-oracle gates
#   scripts/device-h100.sh campaign  CUDA build of `stock` + campaigns/h100.yaml (gates, sweep, bench, report)
#   scripts/device-h100.sh sweep     paged vs stock serving sweep + batched-bench on the GPU
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/parity-device-out}; mkdir -p "$OUT"
export PARITY_CACHE=$PWD/.device-cache PYTHONUNBUFFERED=1 GGML_NO_BACKTRACE=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/gguf-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
P="python3 -m parity --artifacts $OUT/runs"
PROF=campaigns/profiles/h100-device.yaml
stage=${1:?stage: build|121a|gates|campaign|sweep}
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "[time] $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc: $*" | tee -a "$OUT/timings.txt"; return $rc; }
case $stage in
build)
  t $P hw -p $PROF | tee "$OUT/hw.txt"
  t $P lock wait -p $PROF --timeout 60 2>&1 | tail -3 | tee "$OUT/lock.txt"
  t $P lock status -p $PROF 2>&1 | tee -a "$OUT/lock.txt"
  t $P build -p $PROF -e paged -j 16 2>&1 | tail -3
  t $P build -p $PROF -e paged -j 16 2>&1 | tail -1   # cache hit
  cp "$($P build -p $PROF -e paged --print-cmake --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["dir"])')/build.json" "$OUT/build-paged.json"
  B=$(python3 -c 'import json; print(json.load(open("'$OUT'/build-paged.json"))["bin_dir"])')
  t "$B/llama-completion" --version 2>&1 | tee "$OUT/cuda-runtime.txt" | tail -2
  t "$B/test-backend-ops" -o ADD -b CUDA0 2>&1 | grep -E "Device 0|tests passed|backends passed" | tee -a "$OUT/cuda-runtime.txt"
  [ "${WITH_121A:-1}" = 1 ] && OUT=$OUT bash "$0" 121a
  ;;
121a)
  # 121a: configure with the flags parity generates, compile one ggml-cuda object
  $P build -p $PROF -e paged-121a --print-cmake --json > "$OUT/121a-plan.json"
  D=$(python3 -c 'import json; print(json.load(open("'$OUT'/121a-plan.json"))[0]["dir"])')
  mkdir -p "$D/src" && tar xzf .carry/llama-src.tgz -C "$D/src" --strip-components=1
  CONF=$(python3 -c 'import json,shlex; print(shlex.join(json.load(open("'$OUT'/121a-plan.json"))[0]["configure"]))')
  t bash -c "$CONF" > "$OUT/121a.log" 2>&1
  OBJ=$(ninja -C "$D/build" -t targets all | grep -o 'ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/[^:]*acc.cu.o' | head -1)
  t ninja -C "$D/build" "$OBJ" >> "$OUT/121a.log" 2>&1
  ninja -C "$D/build" -t commands "$OBJ" | tail -1 > "$OUT/121a-nvcc-command.txt"
  grep -o -- '-gencode[^ ]*\|--generate-code=[^ ]*\|arch=[^ ]*' "$OUT/121a-nvcc-command.txt" | sort -u | tee -a "$OUT/121a.log"
  ls -la "$D/build/$OBJ" | tee -a "$OUT/121a.log"; cuobjdump --list-elf "$D/build/$OBJ" 2>&1 | head -3 | tee -a "$OUT/121a.log"
  ;;
gates)
  t $P build -p $PROF -e stock -j 16 2>&1 | tail -2
  t $P gate -p $PROF --json > "$OUT/gate.json"; tail -c 300 "$OUT/gate.json"
  t $P snapshot -p $PROF 2>&1 | tail -24
  ;;
campaign)
  t $P build -p $PROF -e stock -j 16 2>&1 | tail -2
  t $P campaign run campaigns/h100.yaml 2>&1 | tail -40
  ;;
sweep)
  t $P snapshot -p $PROF --repeat 3 --no-gates 2>&1 | tail -14
  t $P bench -p $PROF -e paged 2>&1 | tail -12
  ;;
esac
cd "$OUT" && tar czf runs.tgz runs 2>/dev/null; rm -rf "$OUT/runs"
