"""The KL gate's text: gates.kl.text (a file), else parity's generated text; and the rule that says
a text is long enough for `chunks` chunks of `ctx` tokens, checked before anything is built.

The rule: at least max(chunks, 2) x ctx whitespace-separated words (llama-perplexity needs
2 x ctx tokens at least, and evaluates chunks x ctx).  Every tokenizer parity meets (BPE with a
pre-tokenizer, SentencePiece, byte level) gives each word one token or more, so that many words
always fill the chunks; llama-perplexity itself would silently evaluate fewer.

The generated text: pseudo-English sentences drawn from fixed word lists by a SHA-256 counter
stream from a seed -- the same bytes on every machine and Python -- and prefix-stable: its first
N words are the first N words of any longer text of the same seed, so each context of a drift
sweep reads the start of the same text.  One text per (seed, words), cached as
<cache>/kl/text-s<seed>-<words>w.txt."""

from __future__ import annotations

import hashlib
from pathlib import Path

from parity.errors import UsageError
from parity.files import atomic_write_bytes

SUBJECTS = (
    "The engine", "A paged cache", "The scheduler", "Each request", "The profiler", "A careful engineer",
    "The benchmark", "The shared GPU", "The kernel", "Every worker", "The allocator", "A quiet reviewer",
    "The load generator", "The reference build", "A long prompt", "The decode loop", "The server",
    "The old laptop", "A small team", "The nightly job", "The river", "An early train", "The market",
    "A tired student", "The library", "The village baker", "Our neighbour", "The weather report",
)  # fmt: skip
VERBS = (
    "reads", "writes", "measures", "schedules", "records", "compares", "replays", "checks", "moves",
    "keeps", "splits", "follows", "repeats", "explains", "counts", "copies", "opens", "closes",
    "prepares", "watches", "carries", "finds", "sorts", "paints", "borrows", "returns",
)  # fmt: skip
OBJECTS = (
    "the block table", "the owner file", "the greedy output", "the prefill budget", "the median of five runs",
    "every token", "the decode step", "a CUDA graph", "the expert weights", "the attention mask",
    "a cold cache", "the kernel trace", "the lever map", "the patch series", "a short story",
    "the morning paper", "a bag of apples", "the red door", "two old maps", "the north road",
    "a warm loaf of bread", "the last letter", "the harbour lights", "a list of numbers",
)  # fmt: skip
CLAUSES = (
    "before the lock is released", "so the ratio can be trusted", "under the same session",
    "while the server keeps serving", "and the gate stays green", "with no warmup race",
    "after the rain stopped", "because nobody else would", "for the second time this week",
    "without saying a word", "as the clock struck nine", "until the numbers agreed",
    "even though it was late", "in a very small room", "when the queue was empty", "",
)  # fmt: skip
NUMBERS = ("two", "three", "four", "seven", "twelve", "forty", "a hundred", "nine hundred")
LINE = 78  # columns before a line break
WORDS_PER_TOKEN_NOTE = "a tokenizer gives at least one token per word"


def _draws(seed: int):
    """32-bit integers from SHA-256 over (seed, counter): specified to the byte, not Python's random."""
    counter = 0
    while True:
        block = hashlib.sha256(f"parity-kl-text:{seed}:{counter}".encode()).digest()
        for i in range(0, 32, 4):
            yield int.from_bytes(block[i : i + 4], "big")
        counter += 1


def _sentences(seed: int):
    r = _draws(seed)

    def pick(items):
        return items[next(r) % len(items)]

    while True:
        shape = next(r) % 4
        s = f"{pick(SUBJECTS)} {pick(VERBS)} {pick(OBJECTS)}"
        if shape == 1:
            s += f" and {pick(VERBS)} {pick(OBJECTS)}"
        elif shape == 2:
            s = f"After {pick(NUMBERS)} days, {s[0].lower()}{s[1:]}"
        elif shape == 3:
            s += f", then {pick(OBJECTS)} {pick(('waits', 'changes', 'holds', 'returns', 'breaks'))}"
        clause = pick(CLAUSES)
        yield f"{s} {clause}." if clause else f"{s}."
        if next(r) % 5 == 0:
            yield "\n"  # a paragraph ends


def generate(words: int, seed: int = 0) -> str:
    """The first `words` words of the seed's text, wrapped at LINE columns, ending in a newline."""
    out, line, n = [], "", 0
    for sentence in _sentences(seed):
        if sentence == "\n":
            if line:
                out.append(line)
            out.append("")
            line = ""
            continue
        for w in sentence.split():
            if n == words:
                break
            if line and len(line) + 1 + len(w) > LINE:
                out.append(line)
                line = w
            else:
                line = f"{line} {w}" if line else w
            n += 1
        if n == words:
            break
    if line:
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def needed_words(chunks: int, n_ctx: int) -> int:
    """Words a text needs for `chunks` chunks of `n_ctx` tokens (llama-perplexity wants 2 x n_ctx at least)."""
    return max(chunks, 2) * n_ctx


def generated(directory: Path, chunks: int, n_ctx: int, seed: int = 0) -> Path:
    """The generated text for chunks x n_ctx, written into directory unless it is there, byte for byte."""
    words = needed_words(chunks, n_ctx)
    path = Path(directory) / f"text-s{seed}-{words}w.txt"
    data = generate(words, seed).encode()
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    atomic_write_bytes(path, data)
    return path


def planned(directory: Path, chunks: int, n_ctx: int, seed: int = 0) -> Path:
    """Where generated() puts the text, making nothing (the dry run)."""
    return Path(directory) / f"text-s{seed}-{needed_words(chunks, n_ctx)}w.txt"


def count_words(path: str | Path) -> int:
    return len(Path(path).read_bytes().split())


def check_long_enough(text: str | None, chunks: int, contexts: list[int], where: str = "gates.kl.text") -> None:
    """A text file (None: the generated text, long enough by construction) holds enough words for
    every context; else one line naming the file, its words and what the largest context needs."""
    if not text or not contexts:
        return
    p = Path(text).expanduser()
    if not p.is_file():
        raise UsageError(f"{where}: file not found: {p}")
    have, n_ctx = count_words(p), max(contexts)
    need = needed_words(chunks, n_ctx)
    if have < need:
        raise UsageError(
            f"{where}: {p} has {have} words, too short for {chunks} chunks x {n_ctx} tokens (needs {need} words: "
            f"{WORDS_PER_TOKEN_NOTE}); give a longer text, fewer gates.kl.chunks or a shorter context"
        )
