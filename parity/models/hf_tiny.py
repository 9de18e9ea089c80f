"""A tiny deterministic Hugging Face llama checkpoint: the same weights for every engine.

vLLM serves the directory; llama.cpp gets it as an f32 GGUF made by the llama.cpp
tree's own convert_hf_to_gguf.py.  The tokenizer is a real one that ships inside
a package: mistral_common's SentencePiece model `tokenizer.model.v1` (32000
pieces, byte fallback), which comes with vLLM, so nothing is downloaded.

Same HfTinySpec and tokenizer file -> byte-identical directory.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from msgspec.structs import asdict

from parity.models.spec import HfShape
from parity.engines import buildable
from parity.errors import InfraError, UsageError
from parity.filelock import locked
from parity.gpu.held import refuse_while_held
from parity.llamacpp import source as srcmod
from parity.engines.vllm_install import ensure_vllm, venv
from parity.files import atomic_write_json, sha256_file
from parity.runners.local import LocalRunner

TOKENIZER_FILE = "tokenizer.model.v1"  # in mistral_common/data/
# the v1 model as shipped by mistral_common 1.x; another file would change token ids
TOKENIZER_SHA256 = "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"
VOCAB = 32000
BOS, EOS, UNK = 1, 2, 0
SIDECAR = "parity-hf-tiny.json"


class HfTinySpec(HfShape, frozen=True):
    # Random weights give near-flat logits (top-1/top-2 gaps of a few hundredths of a nat),
    # so rounding differences between engines flip greedy ties.  Two structures fix that
    # and keep the output dependent on the context (so on attention and the KV cache):
    # lm_head row y is the embedding of a fixed random "successor" of y, and o_proj is
    # v_proj's transpose, so attention copies the embeddings of attended tokens into the
    # residual.  The greedy token is the successor of the token that dominates that mix.
    logit_scale: float = 2.0  # lm_head = successor embeddings * logit_scale / sqrt(hidden)
    attn_scale: float = 2.0  # weight of the attention copy against the token's own embedding
    mlp_scale: float = 0.5


def check_spec(spec: HfTinySpec) -> None:
    for name in ("layers", "hidden", "heads", "kv_heads", "ff", "ctx"):
        if getattr(spec, name) <= 0:
            raise UsageError(f"hf-tiny: {name} must be positive")
    if spec.hidden % spec.heads or spec.heads % spec.kv_heads or (spec.hidden // spec.heads) % 2:
        raise UsageError(f"hf-tiny: hidden {spec.hidden}, heads {spec.heads}, kv_heads {spec.kv_heads}: need hidden % heads == 0, heads % kv_heads == 0 and an even head size")
    if spec.seed < 0 or min(spec.logit_scale, spec.attn_scale, spec.mlp_scale) <= 0:
        raise UsageError("hf-tiny: seed must be >= 0, logit_scale, attn_scale and mlp_scale > 0")


def find_tokenizer(site_packages: str | Path) -> Path:
    """mistral_common's SentencePiece model inside a venv's site-packages, checked by sha256."""

    path = Path(site_packages) / "mistral_common" / "data" / TOKENIZER_FILE
    if not path.is_file():
        raise InfraError(f"hf-tiny: {path} not found (mistral_common is a vLLM dependency: is this vLLM's venv?)")
    digest = sha256_file(path)
    if digest != TOKENIZER_SHA256:
        raise InfraError(f"hf-tiny: {path} has sha256 {digest[:16]}..., expected {TOKENIZER_SHA256[:16]}... (another mistral_common release?)")
    return path


# --------------------------------------------------------------------------- weights


def tensors(spec: HfTinySpec) -> list[tuple[str, "object"]]:
    """(HF name, float32 array) in a fixed order, from one PCG64 stream."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(spec.seed))
    head = spec.hidden // spec.heads
    kv = spec.kv_heads * head

    def w(rows, cols, std=None):
        std = 1.0 / np.sqrt(cols) if std is None else std
        return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    def copy_back(v):
        """o_proj for a v_proj: head h writes through the transpose of its kv head's rows,
        scaled so o_proj @ v_proj is about attn_scale times a projection."""
        group = spec.heads // spec.kv_heads
        o = np.concatenate([v[(h // group) * head : (h // group + 1) * head].T for h in range(spec.heads)], axis=1)
        return o * np.float32(spec.attn_scale * spec.hidden / float(np.square(v, dtype=np.float64).sum()) / group)

    embed = w(VOCAB, spec.hidden, 1.0)
    out = [("model.embed_tokens.weight", embed)]
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        ln, q, k, v = norm(spec.hidden), w(spec.hidden, spec.hidden), w(kv, spec.hidden), w(kv, spec.hidden)
        out += [
            (p + "input_layernorm.weight", ln),
            (p + "self_attn.q_proj.weight", q),
            (p + "self_attn.k_proj.weight", k),
            (p + "self_attn.v_proj.weight", v),
            (p + "self_attn.o_proj.weight", copy_back(v).astype(np.float32)),
            (p + "post_attention_layernorm.weight", norm(spec.hidden)),
            (p + "mlp.gate_proj.weight", w(spec.ff, spec.hidden)),
            (p + "mlp.up_proj.weight", w(spec.ff, spec.hidden)),
            (p + "mlp.down_proj.weight", w(spec.hidden, spec.ff, spec.mlp_scale / np.sqrt(spec.ff))),
        ]
    out.append(("model.norm.weight", norm(spec.hidden)))
    successor = rng.permutation(VOCAB)
    out.append(("lm_head.weight", embed[successor] * np.float32(spec.logit_scale / np.sqrt(spec.hidden))))
    return out


def safetensors_bytes(named: list[tuple[str, "object"]], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors format (u64 header length, JSON header, raw little-endian data),
    tensors laid out in name order so the bytes depend only on the tensors."""
    header: dict = {"__metadata__": dict(metadata or {})}
    blobs, offset = [], 0
    for name, arr in sorted(named, key=lambda t: t[0]):
        data = arr.astype("<f4", copy=False).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    head += b" " * (-len(head) % 8)  # data starts 8-byte aligned
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


# --------------------------------------------------------------------------- config + tokenizer files


def config_json(spec: HfTinySpec) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.ff,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.hidden // spec.heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.ctx,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
    }


def tokenizer_files() -> dict[str, dict]:
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True} for i, t in ((UNK, "<unk>"), (BOS, "<s>"), (EOS, "</s>"))}
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "clean_up_tokenization_spaces": False,
        "legacy": False,
        "model_max_length": 1_000_000,
        "pad_token": None,
        "sp_model_kwargs": {},
        **special,
    }
    return {"tokenizer_config.json": config, "special_tokens_map.json": special}


def _dump(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def files(spec: HfTinySpec, tokenizer_model: Path) -> dict[str, bytes]:
    """Every file of the checkpoint directory, name -> bytes."""
    check_spec(spec)
    out = {
        "config.json": _dump(config_json(spec)),
        "generation_config.json": _dump({"bos_token_id": BOS, "eos_token_id": EOS, "do_sample": False}),
        "model.safetensors": safetensors_bytes(tensors(spec), {"format": "pt"}),
        "tokenizer.model": Path(tokenizer_model).read_bytes(),
        # the same file under mistral_common's name: `vllm serve --tokenizer-mode mistral`
        # then tokenizes with SentencePiece itself, as llama.cpp does (transformers' converted
        # tokenizer splits runs of spaces differently: "x    y" -> ▁x ▁▁▁▁ y, not ▁x ▁▁▁ ▁y)
        TOKENIZER_FILE: Path(tokenizer_model).read_bytes(),
    }
    out.update({name: _dump(obj) for name, obj in tokenizer_files().items()})
    return out


def write_checkpoint(out_dir: str | Path, spec: HfTinySpec, tokenizer_model: str | Path) -> dict:
    """Write the directory atomically (a sibling temp dir renamed into place); returns
    the sidecar record {spec, files: {name: sha256}}."""
    import hashlib

    out_dir = Path(out_dir)
    content = files(spec, Path(tokenizer_model))
    record = {"spec": asdict(spec), "files": {n: hashlib.sha256(b).hexdigest() for n, b in sorted(content.items())}}
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, data in content.items():
        (tmp / name).write_bytes(data)
    atomic_write_json(tmp / SIDECAR, record)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return record


def is_current(out_dir: str | Path, spec: HfTinySpec) -> bool:
    """The directory holds a complete checkpoint made from this spec (sidecar written last)."""
    d = Path(out_dir)
    try:
        rec = json.loads((d / SIDECAR).read_text())
    except (OSError, ValueError):
        return False
    return rec.get("spec") == asdict(spec) and all((d / n).is_file() for n in rec.get("files", {}))


def _lock_of(path: str | Path) -> Path:
    """The lock beside a checkpoint or GGUF: two runs making it at once share one `.partial`."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


def ensure_checkpoint(out_dir: str | Path, spec: HfTinySpec, tokenizer_model: str | Path) -> Path:
    if not is_current(out_dir, spec):
        refuse_while_held(f"writing the checkpoint {out_dir}")
        with locked(_lock_of(out_dir)):
            if not is_current(out_dir, spec):
                write_checkpoint(out_dir, spec, tokenizer_model)
    return Path(out_dir)


# --------------------------------------------------------------------------- GGUF


def ensure_gguf(hf_dir: str | Path, out_file: str | Path, llama_tree: str | Path, python: str | Path, runner=None, outtype: str = "f32") -> Path:
    """convert_to_gguf once per (checkpoint files, converter script, outtype): a sidecar
    `<out>.hf-tiny.json` records them and is written after the GGUF."""

    hf_dir, out_file, tree = Path(hf_dir), Path(out_file), Path(llama_tree)
    try:
        files = json.loads((hf_dir / SIDECAR).read_text())["files"]
    except (OSError, ValueError, KeyError):
        raise UsageError(f"{hf_dir}: not an hf-tiny checkpoint (no {SIDECAR})") from None
    script = tree / "convert_hf_to_gguf.py"
    key = {"checkpoint": files, "converter_sha256": sha256_file(script) if script.is_file() else None, "outtype": outtype}
    side = out_file.with_name(out_file.name + ".hf-tiny.json")

    def current() -> bool:
        try:
            return out_file.is_file() and json.loads(side.read_text()).get("key") == key
        except (OSError, ValueError):
            return False

    if current():
        return out_file
    refuse_while_held(f"converting {hf_dir} to {out_file}")
    with locked(_lock_of(out_file)):
        if not current():
            side.unlink(missing_ok=True)
            convert_to_gguf(hf_dir, out_file, tree, python, runner, outtype)
            atomic_write_json(side, {"key": key, "tree": str(tree), "sha256": sha256_file(out_file)})
    return out_file


def convert_to_gguf(hf_dir: str | Path, out_file: str | Path, llama_tree: str | Path, python: str | Path, runner=None, outtype: str = "f32", timeout: float = 600) -> Path:
    """Run <llama_tree>/convert_hf_to_gguf.py with `python` (it needs torch, numpy,
    safetensors, sentencepiece: vLLM's venv has them) and the tree's own gguf-py."""

    tree, out_file = Path(llama_tree), Path(out_file)
    script = tree / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise UsageError(f"{tree}: no convert_hf_to_gguf.py (not a llama.cpp tree?)")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_name(out_file.name + ".partial")
    # -B: no __pycache__ in the source tree (a pristine source; its tree id is checked)
    argv = [str(python), "-B", str(script), str(hf_dir), "--outfile", str(tmp), "--outtype", outtype]
    r = (runner or LocalRunner()).run(argv, env={"PYTHONPATH": str(tree / "gguf-py"), "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}, timeout=timeout)
    if not r.ok or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["no output"])[-1]
        why = "timed out" if r.timed_out else f"exit {r.rc}"
        raise InfraError(f"convert_hf_to_gguf.py ({tree.name}) failed ({why}): {last[:200]}")
    os.replace(tmp, out_file)
    return out_file


def ensure_profile_model(profile, name: str, runner=None, out=None) -> Path:
    """models.NAME with an hf: spec: the checkpoint at vllm_path and its GGUF at path, made once.
    Both need the cached vLLM venv: its python runs the converter, its mistral_common ships the
    tokenizer."""

    m = profile.model(name)
    h = m.hf
    spec = HfTinySpec(**{name: getattr(h, name) for name in HfShape.__struct_fields__})
    check_spec(spec)
    ensure_vllm(out)
    v = venv()
    hf_dir = ensure_checkpoint(m.vllm_path, spec, find_tokenizer(v.site_packages()))
    src_name = h.source or next((profile.engine(n).source for n in buildable(profile)), None)
    if src_name is None:
        raise UsageError(f"model {name}: no llama.cpp source to convert it with (models.{name}.hf.source)")
    tree = srcmod.materialize(src_name, profile.sources[src_name], runner or LocalRunner())
    return ensure_gguf(hf_dir, m.path, tree, v.python, runner, h.outtype)
