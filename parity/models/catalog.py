"""The profile's models as `parity models` shows them, and a synth spec from its options."""

from __future__ import annotations

from parity.models.spec import SynthSpec
from parity.errors import UsageError
from parity.models.synth import check_spec, is_current


MOE_DEFAULT_EXPERTS, MOE_DEFAULT_EXPERTS_USED = 8, 2


def spec_from_options(**options) -> SynthSpec:
    """A SynthSpec from CLI options; None keeps the dataclass default."""
    given = {k: v for k, v in options.items() if v is not None}
    dtype = given.get("dtype")
    if dtype is not None and dtype not in ("f32", "f16"):
        raise UsageError(f"--dtype {dtype!r}: expected f32 or f16")
    if given.get("arch") == "qwen35moe":  # a MoE needs experts: the tiny MoE's defaults (8 experts, top 2)
        given.setdefault("experts", MOE_DEFAULT_EXPERTS)
        given.setdefault("experts_used", min(MOE_DEFAULT_EXPERTS_USED, given["experts"]))
    spec = SynthSpec(**given)

    check_spec(spec)
    return spec


def model_rows(profile) -> list[dict]:
    """One row per profile model: exists / missing / stale (synth spec changed)."""
    from pathlib import Path

    rows = []
    for name, m in profile.models.items():
        p = Path(m.path) if m.path else None
        exists = bool(p and p.is_file())
        if m.hf is not None:
            status = "present" if exists else "missing (made on first use from the HF checkpoint, with the vLLM venv)"
            source = f"hf-tiny seed {m.hf.seed} {m.hf.layers}x{m.hf.hidden}, converted {m.hf.outtype} (vLLM: {m.vllm_path})"
        elif m.synth is None:
            status, source = ("present" if exists else "missing"), "file"
        else:
            status = "missing (synthesized on first use)" if not exists else ("present" if is_current(p, m.synth) else "stale (re-synthesized on use)")
            source = _describe(m.synth)
        rows.append({"name": name, "path": m.path, "exists": exists, "status": status, "bytes": p.stat().st_size if exists else None, "source": source})
    return rows


def _describe(spec: SynthSpec) -> str:
    d = SynthSpec()
    text = f"synth {spec.dtype} seed {spec.seed}"
    if (spec.layers, spec.embd) != (d.layers, d.embd):
        text += f" {spec.layers}x{spec.embd}"
    if spec.noise:
        text += f" noise {spec.noise:g}"
    return text
