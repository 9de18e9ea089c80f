"""nsys tool module: command lines, schema-faithful exports, SQL aggregation, windows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from parity.errors import UsageError
from parity.profiles import nsys
from parity.profiles.synthetic import KERNEL_COLUMNS, NVTX_COLUMNS, Kernel, short_name, write_export

DATA = Path(__file__).resolve().parent.parent / "data" / "profile"
GDN = "void gated_delta_net_cuda<128, false, true>(float const*, float*, int)"
MMQ = "void mul_mat_q<(ggml_type)40, 128, false, (ggml_prec)0>(char const*, int const*, float*)"


def test_generator_follows_reference_schema(tmp_path):
    documented = (DATA / "kernel-columns.txt").read_text().split()
    assert set(documented) <= {c for c, _ in KERNEL_COLUMNS}
    assert set((DATA / "nvtx-columns.txt").read_text().split()) <= {c for c, _ in NVTX_COLUMNS}
    db = write_export(tmp_path / "x.sqlite", [Kernel(GDN, 10, 20, 3, 1)], [("prefill", 0, 5)])
    conn = sqlite3.connect(db)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    assert cols[:2] == ["start", "end"] and set(documented) <= set(cols)
    assert [r[1] for r in conn.execute("PRAGMA table_info(StringIds)")] == ["id", "value"]
    # names are ids into StringIds, never inline text
    dn, sn, node = conn.execute("SELECT demangledName, shortName, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    names = dict(conn.execute("SELECT id, value FROM StringIds"))
    assert names[dn] == GDN and names[sn] == "gated_delta_net_cuda" and node == 3


@pytest.mark.parametrize(
    "demangled,short",
    [
        (MMQ, "mul_mat_q"),
        ("void k_bin_bcast<&op_add, float, float, float>(float const*)", "k_bin_bcast"),
        ("nvjet_sm121_tst_128x64_64x6_2x1_v_bz_TNT", "nvjet_sm121_tst_128x64_64x6_2x1_v_bz_TNT"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", "vectorized_elementwise_kernel"),
    ],
)
def test_short_name(demangled, short):
    assert short_name(demangled) == short


def test_profile_argv_exact():
    argv = nsys.profile_argv("nsys", "/r/p/x", ["bench", "-ntg", "64"], graph_node=True)
    assert argv == ["nsys", "profile", "--cuda-graph-trace=node", "--trace=cuda,nvtx", "-o", "/r/p/x", "--force-overwrite", "true", "bench", "-ntg", "64"]
    collapsed = nsys.profile_argv("nsys", "o", ["srv"], graph_node=False, fork=True)
    assert "--cuda-graph-trace=node" not in collapsed and "--trace-fork-before-exec=true" in collapsed
    assert nsys.export_argv("nsys", "a.nsys-rep", "a.sqlite") == ["nsys", "export", "--type", "sqlite", "--output", "a.sqlite", "--force-overwrite", "true", "a.nsys-rep"]


def test_parse_kern_sum_csv_captured_shape():
    groups = nsys.parse_kern_sum_csv((DATA / "cuda_gpu_kern_sum.csv").read_text())
    assert [(g.total_ns, g.instances) for g in groups] == [(1_250_000_000, 600), (1_000_000_000, 1200), (500_000_000, 2400), (250_000_000, 5000)]
    assert groups[0].name.startswith("void gated_delta_net_cuda<128")
    with pytest.raises(UsageError, match="Total Time"):
        nsys.parse_kern_sum_csv("Processing...\nfoo,bar\n1,2\n")


def _export(tmp_path, name="t.sqlite"):
    ks = [Kernel(MMQ, 0, 100), Kernel(GDN, 200, 500)]  # prefill, outside graphs
    ks += [Kernel(GDN, 1000 + i * 1000, 1000 + i * 1000 + 250, i + 1, 1) for i in range(4)]  # decode graph nodes
    ks += [Kernel(MMQ, 1500 + i * 1000, 1500 + i * 1000 + 100, 10 + i, 1) for i in range(4)]
    return write_export(tmp_path / name, ks, [("prefill", 0, 600), ("decode", 900, 5000)])


def test_read_kernel_groups_sums_per_name(tmp_path):
    groups = {g.name: g for g in nsys.read_kernel_groups(str(_export(tmp_path)))}
    assert (groups[GDN].total_ns, groups[GDN].instances, groups[GDN].graph_node_instances) == (300 + 4 * 250, 5, 4)
    assert (groups[MMQ].total_ns, groups[MMQ].instances, groups[MMQ].graph_node_instances) == (100 + 4 * 100, 5, 4)


def test_windows_by_time_and_nvtx(tmp_path):
    db = str(_export(tmp_path))
    w = nsys.decode_window(db, after_nvtx="^prefill$")
    assert w.start_ns == 600
    groups = {g.name: g for g in nsys.read_kernel_groups(db, w)}
    assert groups[GDN].instances == 4 and groups[GDN].total_ns == 1000 and groups[MMQ].instances == 4
    w = nsys.decode_window(db, window_ms=(0.0, 0.0025))  # kernels starting in [0, 2500) ns
    groups = {g.name: g for g in nsys.read_kernel_groups(db, w)}
    assert (groups[GDN].instances, groups[GDN].total_ns) == (3, 300 + 250 + 250)  # starts 200, 1000, 2000
    assert (groups[MMQ].instances, groups[MMQ].total_ns) == (2, 200)  # starts 0, 1500 (2500 is outside)
    with pytest.raises(UsageError, match="no NVTX range matches"):
        nsys.decode_window(db, after_nvtx="nothing-like-this")


def test_parse_window_spec():
    assert nsys.parse_window_spec("10:250.5") == (10.0, 250.5)
    assert nsys.parse_window_spec("10:") == (10.0, None)
    for bad in ("x", "5:3", "-1:2"):
        with pytest.raises(UsageError):
            nsys.parse_window_spec(bad)


def test_bad_inputs_are_one_line_usage_errors(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all" * 100)
    with pytest.raises(UsageError, match="not an SQLite export"):
        nsys.read_kernel_groups(str(junk))
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)").connection.commit()
    with pytest.raises(UsageError, match="CUPTI_ACTIVITY_KIND_KERNEL missing"):
        nsys.read_kernel_groups(str(empty))


# --------------------------------------------------------------------------- other nsys versions


def test_analysis_failure_is_found_in_the_log():
    failed = (DATA / "nsys-analysis-failed-doc.txt").read_text()
    assert nsys.analysis_failure(failed) == "Analysis failed with: Status: TargetProfilingFailed"
    assert nsys.analysis_failure("Unknown runtime API function index: 440\n") == "Unknown runtime API function index: 440"
    ok = "Generating '/tmp/nsys-report-1.qdstrm'\nGenerated:\n    /r/profile/paged-bench-ntg64.nsys-rep\n"
    assert nsys.analysis_failure(ok) is None


def test_no_kernel_table_blames_the_analysis_not_only_the_flags(tmp_path):
    db = write_export(tmp_path / "failed.sqlite", [Kernel(GDN, 0, 10)], kernel_table=False)
    with pytest.raises(UsageError, match="nsys's analysis failed .*'Analysis failed'.*or the capture did not trace CUDA"):
        nsys.read_kernel_groups(str(db))
    graphs_only = write_export(tmp_path / "graphs.sqlite", [], kernel_table=False, graph_launches=[(0, 100, 1)])
    with pytest.raises(UsageError, match="only whole CUDA-graph launches .*--cuda-graph-trace=graph"):
        nsys.read_kernel_groups(str(graphs_only))


def test_graph_trace_table_follows_the_documented_columns(tmp_path):
    from parity.profiles.synthetic import GRAPH_TRACE_COLUMNS

    documented = (DATA / "graph-trace-columns.txt").read_text().split()
    db = write_export(tmp_path / "g.sqlite", [], graph_launches=[(10, 30, 7), (40, 45, 7)])
    cols = [r[1] for r in sqlite3.connect(db).execute(f"PRAGMA table_info({nsys.GRAPH_TRACE})")]
    assert set(documented) <= set(cols) == {c for c, _ in GRAPH_TRACE_COLUMNS}
    assert nsys.graph_launches(str(db)) == {"launches": 2, "total_ns": 25}
    assert nsys.graph_launches(str(db), nsys.Window(35, None)) == {"launches": 1, "total_ns": 5}
    assert nsys.graph_launches(str(_export(tmp_path))) is None  # node mode: no such table


def test_export_metadata_newer_and_older_tables(tmp_path):
    newer = write_export(tmp_path / "new.sqlite", [], capture_meta={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node", "RUN_DURATION_MS": "1234"},
                         export_meta=("META_DATA_EXPORT", {"NSIGHT_SYSTEMS_VERSION": "2024.7.1", "EXPORT_SCHEMA_VERSION": "3.15.1"}))  # fmt: skip
    m = nsys.export_metadata(str(newer))
    assert (m["table"], m["graph_trace_mode"], m["export"]["NSIGHT_SYSTEMS_VERSION"], m["capture"]["RUN_DURATION_MS"]) == ("META_DATA_EXPORT", "node", "2024.7.1", "1234")
    older = write_export(tmp_path / "old.sqlite", [], export_meta=("EXPORT_META_DATA", {"NSIGHT_SYSTEMS_VERSION": "2021.5.1"}))
    m = nsys.export_metadata(str(older))
    assert (m["table"], m["graph_trace_mode"], m["capture"], m["export"]) == ("EXPORT_META_DATA", None, {}, {"NSIGHT_SYSTEMS_VERSION": "2021.5.1"})
    odd = tmp_path / "odd.sqlite"  # columns named otherwise: the first two are name and value
    conn = sqlite3.connect(odd)
    conn.execute("CREATE TABLE EXPORT_META_DATA (key TEXT, val TEXT)")
    conn.execute("INSERT INTO EXPORT_META_DATA VALUES ('NSIGHT_SYSTEMS_VERSION', '2020.3.1')")
    conn.commit()
    assert nsys.export_metadata(str(odd))["export"] == {"NSIGHT_SYSTEMS_VERSION": "2020.3.1"}


def test_export_without_nsys_is_a_clear_error(tmp_path):
    from parity.runners.local import LocalRunner

    rep = tmp_path / "old.nsys-rep"
    rep.write_bytes(b"\0rep")
    with pytest.raises(UsageError, match="not on PATH") as e:
        nsys.export_sqlite(LocalRunner(), "nsys-definitely-missing", str(rep))
    assert "\n" not in str(e.value)
