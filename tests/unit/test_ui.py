"""Human output keeps data verbatim; --json keeps stdout to one document."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parity.ui import Output

REPO = Path(__file__).resolve().parents[2]


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


def test_lines_into_a_pipe_skip_rich_and_stay_verbatim(capsys, monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    o = Output()
    o.info("a :warning: b\r\x07 [x]\tc")
    o.warn("w")
    cap = capsys.readouterr()
    assert cap.out == "a :warning: b [x]\tc\n" and cap.err == "warning: w\n"  # rich's control codes stripped as rich strips them


@pytest.mark.parametrize("force_color", [None, "1"])
def test_rich_is_imported_only_for_a_terminal_or_forced_color(force_color):
    code = "import sys; from parity.ui import Output; Output().info('x'); Output().warn('y'); print('rich' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    if force_color:
        env["FORCE_COLOR"] = force_color
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(bool(force_color)) and "x" in r.stdout and "warning: y" in r.stderr
