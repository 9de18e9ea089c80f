"""`parity bisect`: over the series (the first patch whose application turns a gate red or
moves a metric beyond the rule) or over the pin (the first llama.cpp commit where the series
stops applying, the build fails or the md5 moves).  A run dir holds the probe log
(probes.tsv, bisect.json) and a report section (bisect.md)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

from parity.decode import replace
from parity import session
from parity.bisect import common, probe, search
from parity.errors import ParityError, UsageError
from parity.bisect import upstream
from parity.bisect.apply import apply_at, failure_line
from parity.context import Run, run_session
from parity.context import dry_run_session
from parity.gonogo import go_no_go
from parity.gpu.lock import effective_dir
from parity.options import positive_int
from parity.llamacpp import patches
from parity.llamacpp.source import add_pinned_source
from parity.gates.base import gate_inputs
from parity.errors import InfraError

CRITERIA = {"series": ("md5", "oracle", "metric"), "pin": ("apply", "build", "md5", "metric")}


class NoCulprit(ParityError):
    """The bisection ended without naming a culprit (exit 1): its document is kept for --json."""

    def __init__(self, reason: str, doc: dict):
        super().__init__(reason)
        self.doc = doc


@dataclass
class BisectRequest:
    over: str = "series"  # series | pin
    criterion: str = "md5"
    engine: str = "paged"
    series: str | None = None  # a series dir instead of the engine's
    first: str | None = None  # series: the first patch of the range (the good endpoint = the patches before it)
    last: str | None = None  # series: the last patch of the range (the bad endpoint)
    repo: str | None = None  # pin: the llama.cpp checkout or clone
    good: str | None = None  # pin: the good commit
    bad: str | None = None  # pin: the bad commit
    targets: list[str] | None = None  # what each probe builds (default: what the criterion runs)
    judge: probe.Judge = field(default_factory=lambda: probe.Judge("md5"))
    dry_run: bool = False  # the checked plan (endpoints, candidates, the bound) and the go / no-go; nothing is built


def bisect(ctx, req: BisectRequest) -> dict:
    if req.over not in CRITERIA:
        raise UsageError(f"--over must be series or pin, got {req.over!r}")
    if req.criterion not in CRITERIA[req.over]:
        raise UsageError(f"--criterion {req.criterion!r}: over the {req.over} it is one of {', '.join(CRITERIA[req.over])}")
    prof = ctx.profile
    common.llama_engine(prof, req.engine, "bisect")
    req.judge.criterion = req.criterion
    _defaults(prof, req)
    check_judge(prof, req)
    plan = _series_plan(prof, req) if req.over == "series" else _pin_plan(prof, req, ctx.runner, ctx.out)
    if req.dry_run:
        doc = dry_plan(prof, req, plan)
        with dry_run_session(ctx, "bisect", f"bisect-{req.over}-{req.criterion}") as rd:
            doc["go_no_go"] = go_no_go(ctx.as_run(), prof.lock, prof.hardware_class,
                                       gpu=req.criterion not in ("apply", "build"))  # fmt: skip
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    with run_session(ctx, "bisect", f"bisect-{req.over}-{req.criterion}"):
        model = req.judge.model or prof.serving.model

        def prepare_model() -> str | None:  # before the lock, once
            session.prepare(ctx, models=[model])
            return session.model_file(prof, model) if req.criterion == "metric" else None

        if "probe" in plan:  # apply: the series against each commit, nothing built or locked
            return search_run(ctx.as_run(), req, plan, plan)
        probes = _probes(ctx.as_run(), prof, req, plan, lambda: session.locked(ctx), prepare_model)
        return search_run(ctx.as_run(), req, plan, probes)


def search_run(run: Run, req: BisectRequest, plan: dict, probes: dict) -> dict:
    """The reference (when the criterion has one), then the halvings; bisect.json, probes.tsv and
    bisect.md in the run dir; NoCulprit when the search names none."""
    labels = plan["labels"]
    doc = {"kind": "bisect", "over": req.over, "criterion": req.criterion, "engine": req.engine, **plan["info"], "labels": labels, "n": len(labels) - 1,
           "bound": search.bound(len(labels) - 1), "judge": dataclasses.asdict(req.judge), "probes": [], "run_dir": str(run.dir.path)}  # fmt: skip
    run.out.info(f"[bisect] {req.over}, {req.criterion}: {doc['n']} candidates between {labels[0]} (good) and {labels[-1]} (bad); at most {doc['bound']} probes")

    def on_probe(p: search.Probe) -> None:
        doc["probes"].append(p.to_dict())
        run.dir.write_json("bisect.json", doc)
        run.dir.write_text("probes.tsv", search.tsv([search.Probe(**d) for d in doc["probes"]]))
        run.out.info(f"[bisect] probe {p.n if p.role != 'reference' else 'ref'} ({p.role}) {p.label}: {search.build_cell(p.build)}; {p.result} -> {p.verdict}")

    if "reference" in probes:
        on_probe(probes["reference"]())
    res = search.bisect(doc["n"], labels, probes["probe"], verify_good=plan["verify_good"], on_probe=on_probe)
    doc.update(culprit=None if res.culprit is None else labels[res.culprit], culprit_state=res.culprit, reason=res.reason, probes_counted=res.counted, within_bound=res.counted <= res.bound)
    if res.culprit is not None:
        doc["evidence"] = next(p.to_dict() for p in res.probes if p.state == res.culprit)
    run.dir.write_json("bisect.json", doc)
    run.dir.write_text("bisect.md", section(doc))
    if res.culprit is None:
        raise NoCulprit(res.reason, doc)
    return doc


METRICS = ("s_tg", "s_pp", "s")


def check_judge(profile, req: BisectRequest) -> None:
    """Every option the probes will read, checked before anything is built (the dry run and the real run alike)."""
    j = req.judge
    if req.criterion in ("md5", "metric"):
        session.check_model(profile, j.model or profile.serving.model)
    if req.criterion != "metric":
        return
    if j.metric not in METRICS:
        raise UsageError(f"--metric {j.metric!r}: one of {', '.join(METRICS)} (the llama-batched-bench throughputs)")
    if not (isinstance(j.threshold_pct, (int, float)) and math.isfinite(j.threshold_pct) and j.threshold_pct >= 0):
        raise UsageError(f"--min-delta-pct must be a finite percentage >= 0, got {j.threshold_pct!r}")
    for name, v in (("--blocks", j.blocks), ("--max-blocks", j.max_blocks)):
        if not positive_int(v):
            raise UsageError(f"{name} must be a positive integer, got {v!r}")
    if j.blocks > j.max_blocks:
        raise UsageError(f"--blocks {j.blocks} / --max-blocks {j.max_blocks}: need 1 <= blocks <= max-blocks")
    b = profile.serving.bench
    for name, vals in (("--npp", j.npp or b.npp), ("--ntg", j.ntg or b.ntg), ("--npl", j.npl or b.npl)):
        if not vals or not all(map(positive_int, vals)):
            raise UsageError(f"{name}: expected positive integers, got {vals!r}")


def dry_plan(profile, req: BisectRequest, plan: dict) -> dict:
    """The bisection a real run would make: its endpoints and candidates, the bound, what each probe
    builds and runs, and the lock its probes take (the dry run adds the go / no-go)."""
    n = len(plan["labels"]) - 1
    return {"dry_run": True, "kind": "bisect", "over": req.over, "criterion": req.criterion, "engine": req.engine, **plan["info"], "labels": plan["labels"], "n": n,
            "bound": search.bound(n), "judge": dataclasses.asdict(req.judge), "targets": req.targets or probe.TARGETS.get(req.criterion), "lock": str(effective_dir(profile.lock))}  # fmt: skip


def _defaults(profile, req: BisectRequest) -> None:
    j, g = req.judge, profile.gates
    if req.criterion == "md5":
        j.model = j.model or (g.models[0] if g.models else None)
        if not j.model:
            raise UsageError("--model: the profile has no gates.models to take one from")
        j.path = j.path or profile.engine(req.engine).default_path
    if req.criterion == "oracle":
        j.ops = j.ops or list(g.ops)
        if not j.ops:
            raise UsageError("--ops: the profile has no gates.ops to take them from")
    if req.criterion == "metric":
        j.threshold_pct = j.threshold_pct if j.threshold_pct is not None else profile.stats.min_delta_pct


def _variant(profile, req: BisectRequest, **changes):
    base = profile.engine(req.engine)
    targets = req.targets or probe.TARGETS[req.criterion] or list(base.targets)
    return replace(base, targets=targets, expected_tree=None, fork=None, **changes)


def _num(name: str) -> str:
    return re.match(r"^(\d+)-", name).group(1)


def _series_plan(profile, req: BisectRequest) -> dict:
    if req.repo or req.good or req.bad:
        raise UsageError("--repo, --good and --bad go with --over pin")
    sdir = common.series_dir(profile, req.engine, req.series)
    found = patches.list_series(sdir)
    nums = [int(_num(p.name)) for p in found]
    lo = int(patches.patch_number(req.first, "--first")) if req.first else nums[0]
    hi = int(patches.patch_number(req.last, "--last")) if req.last else nums[-1]
    cand = [p for p, n in zip(found, nums) if lo <= n <= hi]
    if not cand or lo > hi:
        raise UsageError(f"series {sdir}: no patch in {lo:04d}..{hi:04d}")
    before = [p for p, n in zip(found, nums) if n < lo]
    good_label = f"{before[-1].name} (the patches before the range)" if before else "stock (no patch)"
    # the good endpoint: the patches before the range, or the pin without any (the stock twin)
    good = _variant(profile, req, series=sdir, series_until=_num(before[-1].name), series_without=[]) if before else _variant(profile, req, series=None, series_until=None, series_without=[])
    info = {"series_dir": sdir, "range": [cand[0].name, cand[-1].name], "good_endpoint": good_label}
    return {"labels": [good_label] + [p.name for p in cand], "good": good, "verify_good": False, "info": info,
            "variant": lambda k: _variant(profile, req, series=sdir, series_until=_num(cand[k - 1].name), series_without=[])}


def _pin_plan(profile, req: BisectRequest, runner, out) -> dict:
    if req.first or req.last:
        raise UsageError("--first and --last go with --over series")
    if not (req.good and req.bad):
        raise UsageError("--over pin needs --good COMMIT and --bad COMMIT")
    sdir = common.series_dir(profile, req.engine, req.series)
    repo = upstream.repository(common.repo_of(profile, req.engine, req.repo), runner, out)
    good, bad = upstream.commit_of(repo, req.good, runner), upstream.commit_of(repo, req.bad, runner)
    commits = [good] + upstream.commits_between(repo, good, bad, runner)
    if len(commits) < 2:
        raise UsageError(f"no commit between {req.good} and {req.bad}")
    labels = [f"{c[:12]} {upstream.subject(repo, c, runner)}".strip() for c in commits]
    info = {"series_dir": sdir, "repo": str(repo), "good": good, "bad": bad, "commits": commits}
    if req.criterion == "apply":
        def apply_probe(k: int) -> search.Probe:
            r = apply_at(repo, commits[k], sdir, runner, out)
            words = f"{r['applied']}/{r['patches']} apply, tree {r['tree_after']}" if r["ok"] else failure_line(r["failure"])
            return search.Probe(0, "", k, "", search.GOOD if r["ok"] else search.BAD, words, {}, r)

        return {"labels": labels, "probe": apply_probe, "verify_good": True, "info": info}
    def at(k: int):
        name = add_pinned_source(profile, req.engine, str(repo), commits[k])
        return _variant(profile, req, source=name, series=sdir, series_until=None, series_without=[])

    return {"labels": labels, "good": at(0), "variant": at, "verify_good": False, "info": info}


def _probes(run: Run, profile, req: BisectRequest, plan: dict, locked, prepare_model) -> dict:
    """Probes that build state k's variant (plan["variant"](k)) and judge it against the good
    endpoint, which is built and measured first, once, as the reference (the log's row 'ref', not
    counted).  locked(): the GPU lock, held while a probe is judged; prepare_model(): the judge's
    model made before the lock, its file (the metric criterion's) returned."""
    labels, state = plan["labels"], {}
    references: dict = {}  # the md5 gate's reference runs, shared by every probe

    def reference() -> search.Probe:
        b = probe.build(profile, "bisect-good", plan["good"], run.runner, run.out)
        if b.get("failed"):
            raise InfraError(f"the good endpoint {labels[0]} does not build: {b['error']}")
        model_file = prepare_model()
        with locked():  # gates run under the GPU lock, builds before it
            inputs = gate_inputs(profile, references=references)
            state["ref"] = probe.Reference(inputs, run, "bisect-good", req.judge, model_file, profile.serving.bench,
                                           profile.stats.confidence)  # fmt: skip
        return search.Probe(0, "reference", 0, labels[0], search.GOOD, state["ref"].result(), b, {"md5": state["ref"].md5, "ops": state["ref"].ops})

    def one(k: int) -> search.Probe:
        name = f"bisect-{k}"
        b = probe.build(profile, name, plan["variant"](k), run.runner, run.out)
        if b.get("failed"):
            return search.Probe(0, "", k, "", search.BAD, f"build failed: {b['error']}", b, {"build_error": b["error"], "apply": b.get("apply")})
        if req.criterion == "build":
            return search.Probe(0, "", k, "", search.GOOD, "built", b, {})
        with locked():
            inputs = gate_inputs(profile, references=references)  # the variant just registered, bound with the others
            verdict, words, ev = probe.judge(state["ref"], inputs, name, tag=f"probe-{k}-")
        return search.Probe(0, "", k, "", verdict, words, b, ev)

    return {"probe": one, "reference": reference}


def section(doc: dict) -> str:
    probes = [search.Probe(**d) for d in doc["probes"]]
    out = [f"## Bisection over the {doc['over']}: {doc['criterion']}", ""]
    out.append(f"- candidates: {doc['n']} between `{doc['labels'][0]}` (good) and `{doc['labels'][-1]}` (bad); bound ceil(log2 {doc['n']}) + 1 = {doc['bound']} probes")
    out.append(f"- probes: {doc.get('probes_counted', len(probes))} (the known-bad endpoint and the halvings; the good endpoint is the reference, built and measured once, not counted)")
    if doc["criterion"] == "metric":
        j = doc["judge"]
        out.append(f"- rule: {j['metric'].upper()} probe/good in paired blocks (ABBA), regressed beyond {j['threshold_pct']:g}% = bad, not slower than that at every point (interval low end >= {1 / (1 + j['threshold_pct'] / 100):.3f}) = good; {j['blocks']} blocks, up to {j['max_blocks']} when undecided")
    out += ["", f"**{'culprit: `' + doc['culprit'] + '`' if doc.get('culprit') else 'no culprit'}**: {doc.get('reason', '')}", "", search.markdown(probes)]
    return "\n".join(out)
