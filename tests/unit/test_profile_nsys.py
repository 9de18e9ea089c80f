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


def test_export_without_nsys_is_a_clear_error(tmp_path):
    from parity.runners.local import LocalRunner

    rep = tmp_path / "old.nsys-rep"
    rep.write_bytes(b"\0rep")
    with pytest.raises(UsageError, match="not on PATH") as e:
        nsys.export_sqlite(LocalRunner(), "nsys-definitely-missing", str(rep))
    assert "\n" not in str(e.value)
