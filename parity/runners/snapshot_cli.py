"""Logic behind `parity snapshot` and `parity bench`."""

from __future__ import annotations


def snapshot(npl, ptok, gen, parallel, ctx_len, engines, model, repeat, no_gates, allow_env, dry_run, profile, json_mode, order=None) -> int:
    from parity.commands.common import make_context, parse_int_list, parse_str_list
    from parity.context import run_session
    from parity.runners.snapshot import dry_run as do_dry_run
    from parity.runners.snapshot import make_plan, run_snapshot

    ctx = make_context(profile, json_mode)
    plan = make_plan(ctx, parse_int_list(npl, "--npl"), parse_str_list(engines), model, repeat, ptok=ptok, gen=gen, parallel=parallel, ctx_len=ctx_len, order=order)
    if dry_run:
        from parity.runners.snapshot import _check_env

        _check_env(ctx, plan, allow_env)
        doc = do_dry_run(ctx, plan)

        def human():
            import shlex

            ctx.out.info(f"snapshot plan: model {doc['model']}, engines {', '.join(doc['engines'])}, N {doc['npl']}, repeat {doc['repeat']}, order {' '.join(doc['order'])}")
            for c in doc["commands"]:
                if "error" in c:
                    ctx.out.info(f"# {c['engine']}: {c['error']}")
                    continue
                env = " ".join(f"{k}={shlex.quote(v)}" for k, v in c["env"].items())
                unset = " ".join(f"-u {u}" for u in c["unset"])
                if c["model_error"]:
                    ctx.out.warn(f"{c['engine']}: {c['model_error']} (a real run stops here)")
                ctx.out.info(f"# {c['engine']} (served as {c['served_name'] or '?'}; ready: {c['ready']} within {c['ready_timeout_s']:g} s, probes {c['ready_probe_timeout_s']:g} s)")
                ctx.out.info(f"env {unset} {env} {' '.join(shlex.quote(a) for a in c['argv'])}".replace("env  ", "env "))
            pf = doc["preflight"]
            ctx.out.info(f"preflight: lock {doc['lock_dir']}; gpu: {pf['gpu']}; docker: {pf['docker']}; port {doc['shape']['port']} {'free' if doc['port_free'] else 'IN USE'}")

        ctx.out.emit(doc, human)
        return 0
    with run_session(ctx, "snapshot", f"snapshot-{plan.model}"):
        if no_gates:
            ctx.run.mark_invalid("ungated: --no-gates")
        doc = run_snapshot(ctx, plan, gates=not no_gates, allow_env=allow_env)

        def human():
            rows = [[m["engine"], m["n"], m["repeats"], m["decode_agg_tps"], m["agg_tps"], m["prefill_tps"], m["ttft_p50_ms"]] for m in doc["medians"]]
            ctx.out.table("medians", ["engine", "N", "repeats", "decode_agg t/s", "agg t/s", "prefill t/s", "TTFT p50 ms"], rows)
            for r in doc["ratios"]:
                ctx.out.info(f"{r['engine']}/{r['reference']} N={r['n']}: decode_agg {r['decode_agg_tps']}, agg {r['agg_tps']}, prefill {r['prefill_tps']}, TTFT p50 {r['ttft_p50_ms']}")
            from parity.metrics import render_definitions

            ctx.out.info(render_definitions(["decode_agg_tps", "agg_tps", "prefill_tps", "ttft_p50_ms"]))
            ctx.out.info(f"-> {ctx.run.path}")

        ctx.out.emit({"run_dir": str(ctx.run.path), **doc}, human)
    return 0


def bench(npp, ntg, npl, engine, model, allow_env, profile, json_mode) -> int:
    from parity.commands.common import make_context, parse_int_list
    from parity.context import run_session
    from parity.runners.batched_bench import run_bench

    ctx = make_context(profile, json_mode)
    with run_session(ctx, "bench", "bench"):
        doc = run_bench(ctx, engine, model, parse_int_list(npp, "--npp"), parse_int_list(ntg, "--ntg"), parse_int_list(npl, "--npl"), allow_env)
        rows = [[r["pp"], r["tg"], r["b"], r["n_kv"], r["t_pp"], r["s_pp"], r["t_tg"], r["s_tg"], r["t"], r["s"]] for r in doc["rows"]]
        ctx.out.emit({"run_dir": str(ctx.run.path), **doc}, lambda: ctx.out.table(f"llama-batched-bench ({doc['engine']})", ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"], rows))
    return 0
