"""The CUPTI trace format (as parity_cupti.cpp writes it) -> nsys-shaped SQLite, and the
refusals: a process that did not exit, dropped records, a collapsed trace, a launch whose
kernel count is not its graph's node count.  The lines here follow the library's fprintf
formats field for field (tests/unit/test_tracer_captured.py reads real captured files)."""

from __future__ import annotations

import re
import sqlite3

import pytest

from parity.errors import InfraError
from parity.profiles.analysis import analyze_file
from parity.profiles.buckets import default_table
from parity.tracer import build, trace

GEMV = "_Z13mul_mat_vec_qIL9ggml_type8ELi1ELb0EEvPKvS2_PKi"
NORM = "_Z11rms_norm_f32ILi1024ELb1ELb0EEvPKfPfi"


def header(pid=77):
    return f"# parity-cupti 1\n# cupti_version 130001\n# pid {pid}\n# out /x/cap.cupti.{pid}.tsv\n"


def k(start, end, corr, gid, node, name_id, stream=13):
    return "\t".join(map(str, ["K", start, end, 0, 1, stream, corr, gid, node, 128, 1, 1, 256, 1, 1, 40, 0, 4096, 0, 1, name_id])) + "\n"


def footer(kernels, launches=0, dropped=0):
    return f"# dropped {dropped}\n# buffers 3 0\n# records {kernels} 1 1 {launches}\n# end\n"


def decode_trace(steps=3, pid=77, end=True, node_ids=True, nodes=2, launch_lines=True, second_node=1):
    """A plain launch (warmup), then `steps` replays of a graph of 2 kernel nodes.  As on the H100
    (tests/data/profile/cupti): graph 4 is instantiated as executable graph 9 (G 4 9), a launch
    names 9 (L corr 9 4), and its kernels carry graphId 9 and graphNodeId (9 << 32) + node."""
    out = header(pid) + f"N\t1\t{GEMV}\tvoid mul_mat_vec_q<(ggml_type)8, 1, false>(void const*, void const*, int const*)\n"
    out += f"N\t2\t{NORM}\tvoid rms_norm_f32<1024, true, false>(float const*, float*, int)\n"
    out += k(1000, 3000, 5, 0, 0, 1)
    out += f"G\t4\t9\t{nodes + 1}\t{nodes}\n"
    t = 10_000
    node = lambda n: (9 << 32) + n if node_ids else 0  # noqa: E731
    for s in range(steps):
        corr = 100 + s
        out += f"L\t{corr}\t9\t4\n" if launch_lines else ""
        out += k(t, t + 5000, corr, 9, node(0), 1) + k(t + 5200, t + 6000, corr, 9, node(second_node), 2)
        t += 10_000
    out += "M\t500\t900\t0\t1\t13\t6\t0\t0\t1\t1\t3\t4096\n"
    out += "S\t950\t990\t0\t1\t13\t7\t0\t0\t0\t1024\t3\n"
    return out + (footer(1 + 2 * steps, steps) if end else "")


def test_the_format_matches_what_the_library_writes():
    src = build.SOURCE.read_text()
    assert f"#define PARITY_CUPTI_FORMAT {trace.FORMAT}" in src and build.FORMAT == trace.FORMAT
    k_fmt = re.search(r'"K\\t([^"]*)\\n"', src).group(1)
    assert k_fmt.count("%") == trace._K_FIELDS - 1  # every field the library prints is read
    assert re.search(r'"M\\t([^"]*)\\n"', src).group(1).count("%") == trace._M_FIELDS - 1
    assert re.search(r'"S\\t([^"]*)\\n"', src).group(1).count("%") == trace._S_FIELDS - 1


def test_convert_gives_nsys_tables_that_the_analysis_reads(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace())
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    assert trace.problems(s) == []
    assert (s["kernels"], s["graph_node_kernels"], s["graph_launches_seen"], s["graph_trace_mode"]) == (7, 6, 3, "node")
    nc = s["node_check"]
    assert (nc["launches"], nc["matched"], nc["mismatched"], nc["unknown"], nc["by_launch_line"], nc["examples"]) == (3, 3, 0, 0, 3, [])
    assert s["graphs"] == [{"pid": 77, "graph_id": 9, "source_graph_id": 4, "nodes": 3, "kernel_nodes": 2, "distinct_node_ids": 2, "kernels_per_launch": {"2": 3}}]
    cap = analyze_file(str(tmp_path / "cap.sqlite"), default_table(), ntg=3, npl=1)
    rows = {r["bucket"]: r for r in cap["buckets"]}
    assert rows["mmvq"]["instances"] == 4 and rows["mmvq"]["total_ms"] == pytest.approx((2000 + 3 * 5000) / 1e6)
    assert rows["norm"]["instances"] == 3 and cap["graph_node_kernels"] == 6 and cap["graph_trace_mode"] == "node" and not cap["collapsed"]
    conn = sqlite3.connect(tmp_path / "cap.sqlite")
    names = dict(conn.execute("SELECT k.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName WHERE k.correlationId = 5"))
    assert names == {5: "mul_mat_vec_q"}
    assert conn.execute("SELECT graphNodeId, graphId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = 5").fetchone() == (None, None)  # 0 -> NULL, as nsys
    assert conn.execute("SELECT bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone() == (4096,)
    assert conn.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = ?", (trace.MODE_KEY,)).fetchone() == ("node",)


def test_a_process_that_did_not_exit_is_refused(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace(end=False))
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    with pytest.raises(InfraError, match="no end line: the process did not exit normally"):
        trace.require_clean(s)


def test_dropped_records_are_counted_and_refused(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace().replace("# dropped 0", "# dropped 41").replace("# buffers 3 0", "# buffers 70 6"))
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    (p,) = s["processes"]
    assert (p["dropped"], p["buffers_refused"]) == (41, 6)
    with pytest.raises(InfraError, match="CUPTI dropped 41 records"):
        trace.require_clean(s)


def test_a_collapsed_trace_is_refused_like_an_nsys_graph_capture(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace(node_ids=False))
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    assert s["graph_trace_mode"] == "graph"
    with pytest.raises(InfraError, match="collapsed trace: 3 CUDA-graph launches but no kernel carries a graph-node id"):
        trace.require_clean(s)
    assert not [p for p in trace.problems(s, allow_collapsed=True) if "collapsed" in p]


def test_a_launch_short_of_its_graph_nodes_is_named(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace(nodes=3))
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    assert s["node_check"]["mismatched"] == 3 and s["node_check"]["examples"][0]["kernel_nodes"] == 3
    with pytest.raises(InfraError, match="3 of 3 graph launches ran a kernel count that is not their graph's kernel-node count"):
        trace.require_clean(s)


def test_a_node_that_ran_twice_in_one_launch_is_no_match(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace(second_node=0))  # two kernels of one launch on one graph node: one record doubled, one lost
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    assert s["node_check"]["mismatched"] == 3 and s["node_check"]["examples"][0]["distinct_nodes"] == 1


def test_without_launch_lines_the_kernels_graph_id_names_the_executable_graph(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace(launch_lines=False).replace("# records 7 1 1 3", "# records 7 1 1 0"))
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    nc = s["node_check"]
    assert (nc["matched"], nc["unknown"], nc["by_launch_line"]) == (3, 0, 0) and trace.problems(s) == []
    g = tmp_path / "nodes-off.cupti.77.tsv"  # PARITY_CUPTI_GRAPH_NODES=0: the library writes -1 counts
    g.write_text(decode_trace().replace("G\t4\t9\t3\t2", "G\t4\t9\t-1\t-1"))
    s = trace.convert([str(g)], tmp_path / "nodes-off.sqlite")
    assert (s["node_check"]["matched"], s["node_check"]["unknown"]) == (0, 3)


def test_two_processes_merge_with_their_pids(tmp_path):
    for pid in (77, 78):
        (tmp_path / f"cap.cupti.{pid}.tsv").write_text(decode_trace(pid=pid))
    files = trace.trace_files(str(tmp_path / "cap.cupti.%p.tsv"))
    assert [f.rsplit(".", 2)[-2] for f in files] == ["77", "78"]
    s = trace.convert(files, tmp_path / "cap.sqlite")
    assert s["kernels"] == 14 and s["node_check"]["matched"] == 6 and trace.problems(s) == []
    pids = sqlite3.connect(tmp_path / "cap.sqlite").execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1").fetchall()
    assert pids == [(77,), (78,)]


def test_unreadable_lines_and_a_miscount_are_named(tmp_path):
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(decode_trace().replace("# records 7", "# records 9") + "K\t1\t2\n")
    bad = trace.problems(trace.convert([str(f)], tmp_path / "cap.sqlite"))
    assert any("1 unreadable lines" in b for b in bad) and any("wrote 9 kernel records, the file holds 7" in b for b in bad)
    g = tmp_path / "lost.cupti.77.tsv"  # the launch lines are written in batches: a lost batch is named
    g.write_text(decode_trace().replace("L\t101\t9\t4\n", ""))
    bad = trace.problems(trace.convert([str(g)], tmp_path / "lost.sqlite"))
    assert bad == ["pid 77 (" + str(g) + "): the library wrote 3 graph launches, the file holds 2"]


def test_a_process_that_ran_no_graph_is_node_mode_with_nothing_in_a_graph(tmp_path):
    """A workload without CUDA graphs (the lever's paged_nofg arm on the H100): the tracer saw no
    instantiation and no launch, so the export says node mode and the analysis says why no kernel
    has a node id, instead of doubting the capture flags."""
    f = tmp_path / "cap.cupti.77.tsv"
    f.write_text(header() + f"N\t1\t{GEMV}\tvoid mul_mat_vec_q<(ggml_type)8, 1, false>(void const*, void const*, int const*)\n"
                 + k(1000, 3000, 5, 0, 0, 1) + k(4000, 6000, 6, 0, 0, 1) + footer(2))  # fmt: skip
    s = trace.convert([str(f)], tmp_path / "cap.sqlite")
    assert s["graph_trace_mode"] == "node" and s["node_check"]["launches"] == 0 and trace.problems(s) == []
    cap = analyze_file(str(tmp_path / "cap.sqlite"), default_table())
    assert cap["graph_trace_mode"] == "node" and "nothing ran inside a CUDA graph here" in cap["warning"] and not cap["collapsed"]
