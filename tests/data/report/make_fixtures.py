"""Regenerate control/ and candidate/ from captured/ (a real, gated smoke snapshot:
manifest, hardware, gates, builds are verbatim except the trimmed env).

The repeat rows are synthetic with known answers (A = control, B = candidate); their
server-side reconciliation rows are synthetic too (client == server):
  paged decode_agg_tps  +10%, ~1% noise   -> improved
  paged ttft_mean_ms    -15% (and its p50) -> improved (lower is better)
  paged agg_tps         +1.5%             -> within noise (under the 2% floor)
  stock *               unchanged         -> within noise
Medians and ratios come from parity's own snapshot code.  Run from anywhere:
  python tests/data/report/make_fixtures.py
"""

import json
import random
import shutil
from pathlib import Path

from parity.metrics.registry import row_metrics
from parity.serving.summary import medians, ratios
from parity.stats import Rule

HERE = Path(__file__).resolve().parent
BASE = {  # per engine x N: the captured run's medians, rounded
    ("paged", 1): {"decode_agg_tps": 2500.0, "agg_tps": 2000.0, "prefill_tps": 13000.0, "ttft_p50_ms": 2.4},
    ("paged", 4): {"decode_agg_tps": 9000.0, "agg_tps": 4800.0, "prefill_tps": 9700.0, "ttft_p50_ms": 12.6},
    ("stock", 1): {"decode_agg_tps": 6400.0, "agg_tps": 3500.0, "prefill_tps": 14000.0, "ttft_p50_ms": 2.3},
    ("stock", 4): {"decode_agg_tps": 13500.0, "agg_tps": 6200.0, "prefill_tps": 22500.0, "ttft_p50_ms": 5.4},
}
EXTRA = {"wall_s": 0.012, "tpot_ms": 0.3, "itl_p50_ms": 0.2, "itl_p99_ms": 1.5, "decode_window_s": 0.01, "gen_total": 128, "prompt_tok_total": 256}
CHANGE = {("paged", "decode_agg_tps"): 1.10, ("paged", "ttft_p50_ms"): 0.85, ("paged", "ttft_mean_ms"): 0.85, ("paged", "agg_tps"): 1.015}
REPEATS = 5


def rows(candidate: bool) -> list[dict]:
    rng = random.Random(43 if candidate else 42)  # independent 0.3% jitter per run
    out = []
    for rep in range(REPEATS):
        for (eng, n), base in BASE.items():
            row = {"engine": eng, "n": n, "repeat": rep}
            full = {**EXTRA, "ttft_mean_ms": base["ttft_p50_ms"], "ttft_max_ms": base["ttft_p50_ms"] * 1.3, "ttft_p99_ms": base["ttft_p50_ms"] * 1.2,
                    "decode_perseq_tps": base["decode_agg_tps"] / n, "steady_decode_tps": base["decode_agg_tps"] * 0.98, **base}
            for k in row_metrics():
                v = full[k] * (1 + rng.gauss(0, 0.003))
                if candidate:
                    v *= CHANGE.get((eng, k), 1.0)
                row[k] = round(v, 4)
            row.update(requests=n, valid_requests=n, invalid_requests=0, valid=True, invalid_reasons=[])
            row["server"] = {"requests": n, "generation_tokens": row["gen_total"], "prompt_tokens": row["prompt_tok_total"], "preemptions": None, "prefix_queries": row["prompt_tok_total"],
                             "prefix_hits": 0, "prefix_hit_rate": 0.0, "kv_usage_after": None, "ttft_mean_ms": None, "e2e_mean_ms": None}
            row["reconciliation"] = [{"quantity": q, "client": row["server"][q], "server": row["server"][q], "rule": "exact", "status": "ok"}
                                     for q in ("requests", "generation_tokens", "prompt_tokens")]
            out.append(row)
    return out


def make(name: str, candidate: bool) -> None:
    d = HERE / name
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(HERE / "captured", d)
    s = json.loads((d / "summary.json").read_text())
    s["rows"] = rows(candidate)
    s["shape"]["repeat"] = REPEATS
    med = medians(s["rows"])
    s["medians"] = [m.flat() for m in med]
    s["ratios"] = [r.flat() for r in ratios(s["rows"], med, s["reference_engine"], Rule())]
    (d / "summary.json").write_text(json.dumps(s, indent=2) + "\n")
    m = json.loads((d / "manifest.json").read_text())
    m["run_id"] = f"20261122_1814{22 if not candidate else 55}_snapshot-tiny"
    m["argv"] = ["parity", "--artifacts", "runs", "snapshot", "-p", "smoke", "--model", "tiny", "--npl", "1,4", "--repeat", str(REPEATS)]
    (d / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    if candidate:
        (d / "profile").mkdir()
        (d / "profile" / "analysis.json").write_text(json.dumps(analysis(), indent=2) + "\n")
        (d / "bench.json").write_text(json.dumps(bench(), indent=1))


def bench() -> dict:
    """bench.json from the real captured llama-batched-bench table (tests/data/bench)."""
    from parity.bench.batched_bench import parse

    rows = parse((HERE.parent / "bench" / "batched-bench-ok.stdout").read_text())
    cmd = "llama-batched-bench -m small.gguf -c 2048 -b 512 -ub 128 -ngl 99 -fa on -t 1 -npp 32,64 -ntg 8 -npl 1,2"
    return {"engine": "paged", "rows": rows, "command": cmd.split()}


def analysis() -> dict:
    """profile/analysis.json made by parity's own profile code from the captured
    nsys cuda_gpu_kern_sum CSV (tests/data/profile): ntg64 as captured, ntg16 with
    every kernel's time and launch count scaled to a quarter."""
    import csv
    import io
    import tempfile

    from parity.profiles.analysis import analyze_file, build_doc, difference
    from parity.profiles.buckets import default_table

    src = (HERE.parent / "profile" / "cuda_gpu_kern_sum.csv").read_text()
    head, _, body = src.partition('"Time (%)"')
    rows = list(csv.reader(io.StringIO('"Time (%)"' + body)))
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(rows[0])
    for r in rows[1:]:
        if len(r) < 9:
            continue
        total, inst = int(r[1].replace(",", "")), int(r[2].replace(",", ""))
        w.writerow([r[0], f"{total // 4:,}", str(max(1, inst // 4)), *r[3:]])
    with tempfile.TemporaryDirectory() as tmp:
        long_csv, short_csv = Path(tmp) / "ntg64.csv", Path(tmp) / "ntg16.csv"
        long_csv.write_text(src)
        short_csv.write_text(head + out.getvalue())
        table = default_table()
        long = analyze_file(str(long_csv), table, label="paged ntg64", engine="paged", ntg=64, npl=4)
        short = analyze_file(str(short_csv), table, label="paged ntg16", engine="paged", ntg=16, npl=4)
        for c in (long, short):
            c["source"] = f"tests/data/profile/cuda_gpu_kern_sum.csv ({c['label']})"
        return build_doc([long, short], diff=[difference(long, short)], bucket_table="default")


if __name__ == "__main__":
    make("control", False)
    make("candidate", True)
    print("wrote control/ candidate/")
