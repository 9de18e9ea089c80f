"""The runtime banner gate: what a llama.cpp CUDA build says when it starts, held to what was
built.  It reads the server log of every serving arm, so it is measured inside the serving
snapshot (like output parity) and read from its summary: red marks the run invalid.

What the pin (0ed235ea) prints, and where:
- ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_init:
    "%s: found %d " GGML_CUDA_NAME " devices (Total VRAM: %zu MiB):\n"   (2024: "... devices:", no VRAM;
    2023: ggml_init_cublas, no VMM)
    "  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB\n"
  printed through ggml's logger: llama-server, whose own logger takes stderr first, does not show
  them (seen on an H200, tests/data/runtime/h200-pin-llama-server-head.log);
- common/common.cpp, common_params_print_info: "device_info:" then per device
    "  - %-8s: %s (%zu MiB, %zu MiB free)\n" (name, description): llama-server's device lines, with no
  compute capability: the gate then takes it from the run's hardware record (nvidia-smi / NVML);
- common/common.cpp + src/llama.cpp: "system_info: n_threads = N (n_threads_batch = M) / T | ", then
  per backend "NAME : " and "FEATURE = VALUE | " for each of its features;
- ggml_backend_cuda_get_features: ARCHS = __CUDA_ARCH_LIST__ (the built archs x 10, comma-joined:
  "121a" -> 1210, "90;100" -> 900,1000), USE_GRAPHS, PEER_MAX_BATCH_SIZE, ..., and
  BLACKWELL_NATIVE_FP4 = 1 when a device has blackwell_mma_available (ggml-cuda/common.cuh): the
  highest compiled arch at or below its cc (100 x major + 10 x minor) is in [1200, 1300).
So at this pin native FP4 is expected on a sm_120 / sm_121 (120a, 121a) build on such a device, and
not on sm_100 (B200, cc 10.0): ggml's FP4 MMA is the sm_120 family's, not tcgen05.  The gate holds
a build to that rule: a runtime that reports a different ARCHS, no code for a device, or native FP4
where the rule says otherwise (either way) is red.  A CPU build prints no CUDA banner: not
applicable, with its reason (never a pass)."""

from __future__ import annotations

import re

from parity.gates.base import GateKind, Target
from parity.gates.checks import FAIL, PASS, Check

NA = "not applicable"
FP4_LOW, FP4_HIGH = 1200, 1300  # GGML_CUDA_CC_BLACKWELL, GGML_CUDA_CC_RUBIN at the pin
FP4 = "BLACKWELL_NATIVE_FP4"

_FOUND = re.compile(r"(?:ggml_cuda_init|ggml_init_cublas): found (\d+) CUDA devices(?: \(Total VRAM: (\d+) MiB\))?:")
_DEVICE = re.compile(r"Device (\d+): (.+?), compute capability (\d+)\.(\d+)(?:, VMM: (yes|no))?(?:, VRAM: (\d+) MiB)?")
_DEVINFO = re.compile(r"^.*? - (CUDA(\d+))\s*: (.+?) \((\d+) MiB, (\d+) MiB free\)\s*$", re.M)
_ARCH = re.compile(r"(\d{2,3})[a-z]?(?:-real|-virtual)?")


# ---- parsing: pure, tested on the smoke build's real line and the pin's format strings --------


def parse_system_info(text: str) -> dict | None:
    """The last `system_info:` line: {"n_threads": int | None, "backends": {name: {feature: value}},
    "line": the backends part as printed}; None when there is none."""
    line = None
    for ln in text.splitlines():
        if "system_info: " in ln:
            line = ln
    if line is None:
        return None
    body = line[line.index("system_info: ") + len("system_info: ") :]
    m = re.match(r"n_threads = (\d+)", body)
    parts = [p.strip() for p in body.split(" | ")]
    backends: dict[str, dict[str, str]] = {}
    current = None
    for p in parts[1:]:
        if not p:
            continue
        *names, feature = p.split(" : ")  # "CUDA : ARCHS = 1210"; "BLAS : CPU : SSE3 = 1": BLAS has none
        for name in names:
            current = backends.setdefault(name.strip(), {})
        if current is None or " = " not in feature:
            if feature.strip().endswith(":"):  # "NAME :" with no feature
                current = backends.setdefault(feature.strip()[:-1].strip(), {})
            continue
        k, v = feature.split(" = ", 1)
        current[k.strip()] = v.strip()
    return {"n_threads": int(m[1]) if m else None, "backends": backends, "line": " | ".join(parts[1:]).strip(" |")}


def parse_cuda_init(text: str) -> dict | None:
    """ggml_cuda_init's lines: {"found": n, "total_vram_mib", "devices": [{id, name, cc, vmm,
    vram_mib}]} (cc as 100 x major + 10 x minor, as ggml compares it); None when absent."""
    m = _FOUND.search(text)
    if m is None:
        return None
    devices = []
    for d in _DEVICE.finditer(text[m.end() :]):
        dev = {
            "id": int(d[1]),
            "name": d[2],
            "cc": 100 * int(d[3]) + 10 * int(d[4]),
            "cc_text": f"{d[3]}.{d[4]}",
            "vmm": None if d[5] is None else d[5] == "yes",
            "vram_mib": int(d[6]) if d[6] else None,
        }
        if dev["id"] in (x["id"] for x in devices):
            break  # a second init (another process's log appended): the first is this one's
        devices.append(dev)
    return {"found": int(m[1]), "total_vram_mib": int(m[2]) if m[2] else None, "devices": devices}


def parse_device_info(text: str) -> list[dict]:
    """common_params_print_info's CUDA device lines: [{id, name, cc: None, vram_mib}] (no cc there)."""
    out = []
    for d in _DEVINFO.finditer(text):
        if int(d[2]) in (x["id"] for x in out):
            break
        out.append({"id": int(d[2]), "name": d[3], "cc": None, "cc_text": "?", "vmm": None, "vram_mib": int(d[4])})
    return out


def with_cc(devices: list[dict], hardware_cc: list[str] | None) -> list[dict]:
    """Devices whose log line gave no compute capability take the hardware record's, by index."""
    out = []
    for d in devices:
        cc = (hardware_cc or [])[d["id"]] if d["cc"] is None and d["id"] < len(hardware_cc or []) else None
        m = re.fullmatch(r"(\d+)\.(\d+)", str(cc or ""))
        out.append({**d, "cc": 100 * int(m[1]) + 10 * int(m[2]), "cc_text": f"{m[1]}.{m[2]}", "cc_from": "hardware"}
                   if m else d)
    return out


def built_archs(cuda_archs: str) -> list[int]:
    """A profile's cuda_archs as __CUDA_ARCH_LIST__ gives them: "90;121a-real" -> [900, 1210]."""
    return sorted({int(m[1]) * 10 for part in cuda_archs.split(";") if (m := _ARCH.fullmatch(part.strip()))})


def runtime_archs(value: str) -> list[int] | None:
    """ARCHS = "1210" or "900,1000" -> [..]; None when it is not a list of numbers."""
    try:
        return sorted({int(x) for x in value.replace(" ", "").split(",") if x})
    except ValueError:
        return None


def highest_compiled(cc: int, archs: list[int]) -> int:
    """ggml_cuda_highest_compiled_arch: the highest built arch at or below cc, -1 when none."""
    return max((a for a in archs if a <= cc), default=-1)


def native_fp4(cc: int, archs: list[int]) -> bool:
    """blackwell_mma_available(cc) at the pin."""
    return FP4_LOW <= highest_compiled(cc, archs) < FP4_HIGH


# ---- the verdict of one arm -------------------------------------------------------------------


def expectation(cuda_archs: str | None) -> str:
    """What the gate holds a build's banner to, in words (the dry run's and the row's expected)."""
    if not cuda_archs:
        return f"{NA}: a CPU build prints no CUDA banner"
    archs = built_archs(cuda_archs)
    fp4 = [a for a in archs if FP4_LOW <= a < FP4_HIGH]
    when = (
        f"{FP4} = 1 on a device whose cc reaches {', '.join(map(str, fp4))}"
        if fp4
        else f"no {FP4} (no arch in [{FP4_LOW}, {FP4_HIGH}) built)"
    )
    return f"ARCHS = {','.join(map(str, archs))} (cuda_archs {cuda_archs}); {when}"


def judge(cuda_archs: str | None, text: str | None, log: str, hardware_cc: list[str] | None = None) -> dict:
    """One arm's row: {status: pass | fail | not applicable, expected, got, why, archs_built,
    archs_runtime, devices, native_fp4, system_info}; log: the log's name, for the words;
    hardware_cc: the run's GPUs' compute capabilities ("9.0", by index) for device lines without one."""
    row: dict = {"expected": expectation(cuda_archs), "got": "-", "archs_built": built_archs(cuda_archs or "")}
    info = parse_system_info(text) if text is not None else None
    row["system_info"] = info["line"] if info else None

    def red(why: str) -> dict:
        return {**row, "status": FAIL, "why": why}

    if not cuda_archs:
        shown = f" (its system_info backends: {', '.join(info['backends']) or 'none'})" if info else ""
        return {**row, "status": NA, "why": f"a CPU build (cuda_archs unset): llama.cpp prints no CUDA banner{shown}"}
    if text is None:
        return red(f"no server log {log} to read the banner from")
    if info is None:
        return red(f"no `system_info:` line in {log} (llama-server prints it at start)")
    cuda = info["backends"].get("CUDA")
    if cuda is None:
        have = ", ".join(info["backends"]) or "none"
        row["got"] = f"backends {have}"
        return red(f"{log}: system_info has no CUDA backend ({have}): the server ran without the build's CUDA backend")
    got_archs = runtime_archs(cuda.get("ARCHS", ""))
    row["archs_runtime"] = got_archs
    row["devices"] = with_cc((parse_cuda_init(text) or {}).get("devices") or parse_device_info(text), hardware_cc)
    reported = cuda.get(FP4) == "1"
    row["got"] = f"ARCHS = {cuda.get('ARCHS', '-')}; {FP4} {'= 1' if reported else 'absent'}" + "".join(
        f"; {d['name']} cc {d['cc_text']}" for d in row["devices"]
    )
    if not got_archs:
        return red(f"{log}: the CUDA backend reports no ARCHS ({cuda.get('ARCHS')!r})")
    if set(got_archs) != set(row["archs_built"]):
        return red(
            f"built for {row['archs_built']} (cuda_archs {cuda_archs}), the runtime reports ARCHS = "
            f"{got_archs}: the server is not the build parity made"
        )
    if not row["devices"]:
        return red(f"no CUDA device line (`ggml_cuda_init: found N CUDA devices` or `device_info: - CUDA0 : ...`) in {log}")
    unknown = [d for d in row["devices"] if d["cc"] is None]
    if unknown:
        return red(f"device {unknown[0]['id']} ({unknown[0]['name']}): no compute capability in {log} nor in the run's "
                   "hardware record, so its code and native FP4 cannot be checked")
    for d in row["devices"]:
        if highest_compiled(d["cc"], got_archs) < 0:
            return red(
                f"device {d['id']} ({d['name']}, cc {d['cc_text']}) has no built arch at or below it "
                f"(ARCHS = {got_archs}): its kernels cannot run there"
            )
    expect = any(native_fp4(d["cc"], got_archs) for d in row["devices"])
    row["native_fp4"] = {"expected": expect, "reported": reported}
    if expect != reported:
        return red(
            f"{FP4} {'reported' if reported else 'absent'}, but this build on these devices gives "
            f"{'it' if expect else 'none'} (the highest built arch at or below a device's cc in "
            f"[{FP4_LOW}, {FP4_HIGH}): ggml-cuda/common.cuh at the pin)"
        )
    return {**row, "status": PASS, "why": ""}


def overall(rows: list[dict]) -> tuple[str, str]:
    """fail when a row fails, pass when one passed and none failed, else not applicable (why: the rows')."""
    failed = [r for r in rows if r["status"] == FAIL]
    if failed:
        return FAIL, f"{failed[0]['engine']} r{failed[0]['repeat']}: {failed[0]['why']}"
    if any(r["status"] == PASS for r in rows):
        return PASS, ""
    whys = list(dict.fromkeys(f"{r['engine']}: {r['why']}" for r in rows))
    return NA, "; ".join(whys) if whys else "no llama.cpp server ran"


class BannerGate(GateKind):
    name = "banner"
    what = "runtime banner"
    reads = ("engines",)
    in_gate_set = False

    def measure(self, arms: list[dict]) -> dict:
        """arms: [{engine, repeat, cuda_archs, text, log, applies: None or why not, hardware_cc}] -> summary.json "banner"."""
        rows = []
        for a in arms:
            head = {"engine": a["engine"], "repeat": a["repeat"], "log": a["log"]}
            if a.get("applies"):
                rows.append({**head, "status": NA, "expected": "-", "got": "-", "why": a["applies"]})
            else:
                rows.append({**head, **judge(a.get("cuda_archs"), a.get("text"), a["log"], a.get("hardware_cc"))})
        status, why = overall(rows)
        return {"status": status, "why": why, "rows": rows}

    def dry(self, inputs, runner, out, spec, t: Target) -> dict:
        e = inputs.engine(t.engine).section
        return {"commands": [], "expected": expectation(getattr(e, "cuda_archs", None)), "files": {}}

    def from_summary(self, doc: dict) -> Check | None:
        """Its verdict in a snapshot's summary; None where it did not apply (a CPU build, no llama
        engine): nothing was held, so nothing passed."""
        b = doc.get("banner")
        if not isinstance(b, dict) or b.get("status") not in (PASS, FAIL):
            return None
        rows = [r for r in b.get("rows") or [] if r.get("status") in (PASS, FAIL)]
        got = f"{sum(r['status'] == PASS for r in rows)}/{len(rows)} arms as built"
        return Check(
            self.what,
            self.name,
            "the runtime's ARCHS and native FP4 as the build gives them",
            got,
            PASS if b["status"] == PASS else FAIL,
            b.get("why") or "",
        )


KIND = BannerGate()
