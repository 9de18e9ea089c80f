"""Human output keeps data verbatim; --json keeps stdout to one document."""

import json

from parity.ui import Output


def test_table_cells_are_data_not_markup(capsys):
    Output().table("gates [pre]", ["check [x]", "status"], [["op MUL_MAT(type_a=[f16])", "[ok  ]"], ["md5 tiny/paged", None]])
    out = capsys.readouterr().out
    assert "gates [pre]" in out and "check [x]" in out and "MUL_MAT(type_a=[f16])" in out and "[ok  ]" in out


def test_json_mode_puts_tables_and_info_on_stderr(capsys):
    o = Output(json_mode=True)
    o.info("[bold]hello[/bold]")
    o.table(None, ["a"], [[1]])
    o.emit({"x": 1})
    cap = capsys.readouterr()
    assert json.loads(cap.out) == {"x": 1} and "[bold]hello[/bold]" in cap.err and "a" in cap.err
