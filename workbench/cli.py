"""The ``workbench`` command line.

User mistakes (unknown workload, bad spec, bad target, unreadable store...)
print one line on stderr and exit with code 2; with ``--json`` the last line of
stdout is a single JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys

from .cost_model import COST_MODELS
from .dtypes import rate_unit
from .errors import WorkbenchError
from .events import EventKind as K
from .noise import describe as noise_line

EXIT_USER = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        sys.stderr.write(
            f"workbench: error: {message} (see 'workbench {self.prog.split()[-1]} --help')\n"
            if " " in self.prog
            else f"workbench: error: {message} (see 'workbench --help')\n"
        )
        sys.exit(EXIT_USER)


def _positive(v):
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v!r} must be at least 1")
    return n


def _fraction(v):
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if not 0 < x <= 4:
        raise argparse.ArgumentTypeError(f"{v!r} must be in (0, 4]")
    return x


def _int(v):
    try:
        return int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="workbench", description="Auto-schedule tensor programs on TVM (Ansor-style search).")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    w = sub.add_parser("workloads", help="list the registered workloads and networks")
    w.add_argument("--json", action="store_true")

    t = sub.add_parser("tune", help="tune one workload, or a network's layers in one session")
    t.add_argument(
        "workload",
        nargs="?",
        help="a registered workload or network name (see 'workbench workloads'), or a spec file (NAME.json: as --spec)",
    )
    t.add_argument(
        "--spec",
        help="a JSON file with one workload spec, or a list: all of them are tuned as one "
        "network (their 'weight' = multiplicity) unless --workload picks one",
    )
    t.add_argument("--workload", dest="pick", help="which workload of a --spec list to tune on its own")
    t.add_argument(
        "--trials",
        type=_positive,
        default=None,
        help="trial budget (default 64; with --resume, the stored budget); for a network, the budget "
        "of all its layers together (default: two rounds per layer)",
    )
    t.add_argument("--preset", default="quick", help="quick (2-core sized) or faithful (Ansor's defaults)")
    t.add_argument("--trials-per-round", type=_positive, default=None, help="override the preset's batch size")
    t.add_argument("--seed", type=_int, default=0)
    t.add_argument("--db", default="workbench.db", help="records store (SQLite), created if missing")
    t.add_argument("--resume", action="store_true", help="continue the latest session of this workload in --db")
    t.add_argument(
        "--target", default="host", help='\'host\' or a JSON object, e.g. \'{"kind":"llvm","mcpu":"znver4"}\''
    )
    t.add_argument(
        "--strategy",
        default="auto",
        help="auto | auto:NAME,NAME... | all | NAME[,NAME...] of no-rewrite, transform-stage, pre-transformed, packed",
    )
    t.add_argument(
        "--runner",
        default="local",
        help="where candidates are timed: local (default) or rpc://HOST:PORT/KEY, the servers registered "
        "under KEY at a TVM RPC tracker (see README, 'Measuring over RPC')",
    )
    t.add_argument(
        "--noise",
        choices=["wait", "mark", "off"],
        default=None,
        help="a disturbed timing (another process took a core, the calibration probe drifted): wait for "
        "a quiet machine and re-time it (wait, the default), only mark the record noisy (mark), or "
        "check nothing (off); see docs/measurement.md",
    )
    t.add_argument(
        "--cost-model",
        choices=sorted(COST_MODELS),
        default=None,
        help="the learned cost model of a new session: pack-sum (Ansor's regression, the default), "
        "pairwise-rank (a pairwise ranking objective) or lambdarank (pairs weighted by their NDCG change, "
        "LambdaMART); a resumed session keeps its own",
    )
    t.add_argument(
        "--prior",
        action="store_true",
        help="start the cost model from the prior that ships with the package (trained on the project's own "
        "corpus; see README, 'Search'): it ranks the first rounds before anything is measured",
    )
    t.add_argument(
        "--prune",
        default=None,
        metavar="RULES",
        help="rule-based pruning of the schedule space for a new session: 'all', or a comma list of "
        "unvectorized, vector-width, serial (see README, 'Search'); programs breaking a rule are not "
        "measured; default none",
    )
    t.add_argument(
        "--deterministic",
        action="store_true",
        help="one search thread, so the seed fixes the proposals (default: the search uses every core, faster "
        "but not reproducible); a resumed session keeps its own",
    )
    t.add_argument("--json", action="store_true", help="print the summary as one JSON object on the last line")
    t.add_argument("--quiet", action="store_true", help="no progress bar")

    s = sub.add_parser("show", help="summarise a records store")
    s.add_argument("db")
    s.add_argument("--json", action="store_true")

    b = sub.add_parser("best", help="the best verified program of a workload in a store")
    b.add_argument("db")
    b.add_argument("workload")
    b.add_argument("--tir", action="store_true", help="also print the program as TVMScript")
    b.add_argument("--export", metavar="PATH", help="compile the program into a shared library at PATH")
    b.add_argument(
        "--time",
        action="store_true",
        help="time the program standalone now (fresh worker processes, 10 repeats) beside the stored "
        "latency: the self-check of a published figure",
    )
    b.add_argument(
        "--threads", type=_positive, default=None, help="threads for --time (default: the session target's num-cores)"
    )
    b.add_argument("--json", action="store_true")

    e = sub.add_parser("export", help="export a store to a MetaSchedule JSONDatabase directory")
    e.add_argument("db")
    e.add_argument("--metaschedule", required=True, metavar="DIR")

    x = sub.add_parser("transfer", help="transfer-tune: apply schedules tuned for other workloads of the same class")
    x.add_argument("workload", nargs="?", help="a registered workload or network name")
    x.add_argument("--from", dest="source", required=True, metavar="DB", help="records store with the tuned sources")
    x.add_argument("--spec", help="a JSON spec file with the target workload(s)")
    x.add_argument("--db", help="records store to write the measured candidates to")
    x.add_argument("--target", default="host")
    x.add_argument("--json", action="store_true", help="one JSON object per workload; the last line sums up")

    m = sub.add_parser("model", help="tune a real model graph (Relax) end to end: extract, tune, compile, compare")
    m.add_argument(
        "name", choices=["resnet18", "mobilenet_v2"], help="the model (a relax.frontend.nn module, random weights)"
    )
    m.add_argument(
        "--dtype",
        choices=["float32", "int8"],
        default="float32",
        help="float32 (default) or int8 (resnet18 only: quantized weights and activations)",
    )
    m.add_argument("--image", type=_positive, default=224, help="input height and width (default 224)")
    m.add_argument("--width", type=_positive, default=None, help="resnet18: channels of the first stage (default 64)")
    m.add_argument("--stages", type=_positive, default=None, help="resnet18: residual stages, 1-4 (default 4)")
    m.add_argument("--width-mult", type=_fraction, default=None, help="mobilenet_v2: channel multiplier (default 1.0)")
    m.add_argument(
        "--layout",
        choices=["NCHW", "NHWC"],
        default=None,
        help="resnet18 float32: the activations' layout between the layers (default NCHW, PyTorch's; int8 is NHWC)",
    )
    m.add_argument("--batch", type=_positive, default=1)
    m.add_argument(
        "--trials",
        type=_positive,
        default=None,
        help="budget for all tasks together (default: two rounds per tuned task)",
    )
    m.add_argument(
        "--max-tasks",
        type=_positive,
        default=None,
        help="tune only the K tasks with the largest calls x FLOPs (the rest keep TVM's default lowering)",
    )
    m.add_argument("--trials-per-round", type=_positive, default=None)
    m.add_argument(
        "--strategy",
        default="no-rewrite",
        help="layout strategy of every task's weights (as `tune --strategy`; default no-rewrite): pre-transformed "
        "and packed rewrite them once, at compile time",
    )
    m.add_argument("--seed", type=_int, default=0)
    m.add_argument("--db", default="workbench.db")
    m.add_argument("--target", default="host")
    m.add_argument("--json", action="store_true", help="the result as one JSON object on the last line")

    r = sub.add_parser("report", help="write a self-contained HTML report of a store (no server needed to view it)")
    r.add_argument("db")
    r.add_argument("-o", "--output", metavar="FILE.html", help="default: DB-STEM-report.html beside DB")
    r.add_argument("--session", type=_positive, nargs="+", action="extend", metavar="ID", help="only these sessions")
    r.add_argument("--no-tir", action="store_true", help="leave out the best programs' TIR (no TVM needed: faster)")

    i = sub.add_parser("import", help="import tuning records from a MetaSchedule JSONDatabase directory")
    i.add_argument("dir", help="the MetaSchedule work_dir (database_workload.json, database_tuning_record.json)")
    i.add_argument("--db", required=True, help="records store to import into")
    i.add_argument("--workload", required=True, help="registered workload name (or --spec) the records are for")
    i.add_argument("--spec", help="a JSON spec file defining the workload")
    return p


# ----------------------------------------------------------------------------- commands


def cmd_workloads(args) -> int:
    from .workloads import registry

    reg = registry()
    if args.json:
        print(
            json.dumps(
                {
                    "workloads": [
                        dict(w.spec(), flops=w.flops, reference=w.reference_kind, source=w.source)
                        for w in reg.workloads.values()
                    ],
                    "networks": {k: [w.name for w in v] for k, v in reg.networks.items()},
                }
            )
        )
        return 0
    for suite, names in reg.suites.items():
        print(f"# {suite}")
        for n in names:
            w = reg.workloads[n]
            weight = f" x{w.weight}" if w.weight != 1 else ""
            print(f"  {n:32s} {w.op:22s} {w.describe()}{weight}  [reference: {w.reference_kind}]")
    print(f"# networks: {', '.join(sorted(reg.networks))}")
    return 0


def _resolve_tune_workload(args):
    """One Workload, or (network name, [Workload, ...]) for a network or a multi-workload --spec file."""
    from .workloads import load_spec_file, registry

    if args.spec and args.workload:
        raise WorkbenchError("give either a workload name or --spec FILE, not both")
    if args.workload and args.workload.endswith(".json"):  # a spec file given where a name goes
        args.spec, args.workload = args.workload, None
    if args.spec:
        ws = load_spec_file(args.spec)
        if args.pick:
            for w in ws:
                if w.name == args.pick:
                    return w
            raise WorkbenchError(
                f"--workload {args.pick!r} is not in {args.spec!r}; it has: {', '.join(w.name for w in ws)}"
            )
        if len(ws) > 1:
            return os.path.splitext(os.path.basename(args.spec))[0], ws
        return ws[0]
    if not args.workload:
        raise WorkbenchError("tune needs a workload name or --spec FILE (see 'workbench workloads')")
    reg = registry()
    if args.workload in reg.networks:
        return args.workload, reg.networks[args.workload]
    return reg.get(args.workload)


def _preset_overrides(args) -> dict:
    """The preset fields a new session's ``tune`` options set (None / False: the preset's own)."""
    given = {
        "trials_per_round": args.trials_per_round,
        "noise": args.noise,
        "cost_model": args.cost_model,
        "deterministic": args.deterministic or None,
        "prior": args.prior or None,
        "pruning": _pruning_rules(args.prune),
    }
    return {k: v for k, v in given.items() if v}


def _no_settings_on_resume(args) -> None:
    """A resumed session goes on with the settings it was made with: an option that would change them is a
    mistake to report, not to ignore."""
    defaults = vars(build_parser().parse_args(["tune"]))
    settings = (
        "preset",
        "seed",
        "target",
        "strategy",
        "trials_per_round",
        "cost_model",
        "prior",
        "prune",
        "deterministic",
    )
    given = ["--" + k.replace("_", "-") for k in settings if getattr(args, k) != defaults[k]]
    if given:
        raise WorkbenchError(
            f"a resumed session keeps the settings it was made with: {', '.join(given)} cannot change them "
            "(with --resume: --trials, --runner and --noise)"
        )


def _pruning_rules(spec):
    from .pruning import parse_rules

    return parse_rules(spec) if spec is not None else None


def cmd_tune(args) -> int:
    from . import presets, tvm_env
    from .session import TuningSession
    from .store import RecordStore

    workload = _resolve_tune_workload(args)
    if isinstance(workload, tuple):
        return _tune_network(args, *workload)
    presets.get(args.preset)
    tvm_env.parse_target(args.target)
    if args.runner != "local":
        from .rpc import parse_runner_url

        parse_runner_url(args.runner)
    if args.resume:
        _no_settings_on_resume(args)
    store = RecordStore(args.db)
    if args.resume:
        row = store.latest_session(workload.name, searches_only=True)
        if row is None:
            raise WorkbenchError(f"nothing to resume: {args.db!r} has no tuning session for {workload.name!r}")
        session = TuningSession.resume(
            store,
            session_id=row["id"],
            trials=args.trials,
            runner=args.runner,
            **({"noise": args.noise} if args.noise else {}),
        )
    else:
        overrides = _preset_overrides(args)
        session = TuningSession(
            workload,
            target=args.target,
            trials=args.trials or 64,
            preset=args.preset,
            seed=args.seed,
            db=store,
            strategy=args.strategy,
            runner=args.runner,
            **overrides,
        )

    unit = rate_unit(session.workload.dtype)
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(
            total=session.trials, desc=workload.name, unit="trial", file=sys.stderr, dynamic_ncols=True, initial=0
        )

        def on_event(e):
            if e.kind == K.SESSION_STARTED:
                bar.n = e.data["trials_done"]
                bar.refresh()
            elif e.kind == K.CANDIDATE_MEASURED:
                bar.update(1)
                if session.best:
                    bar.set_postfix(best=f"{session.best['gflops']:.1f} {unit}", strategy=session.best["strategy"])
            elif e.kind in (K.PAUSED, K.RESUMED, K.STOPPED, K.FAILED):
                bar.write(f"[{e.kind}] {e.data.get('message', '')}".rstrip())
            elif e.kind == K.MEASUREMENT_NOISE:
                bar.write(f"[noise] {noise_line(e.data)}")

        session.subscribe(on_event)

    summ = _run_until_done_or_ctrl_c(session, bar)
    if args.json:
        print(json.dumps(summ))
    else:
        _print_summary(summ, unit)
    return 0 if session.status == "finished" else 130


def _run_until_done_or_ctrl_c(session, bar) -> dict:
    """Ctrl-C stops the session after the current candidate (its records are kept); returns the summary."""

    def _stop(_sig, _frm):
        session.stop()

    old = signal.signal(signal.SIGINT, _stop)
    try:
        session.run()
    finally:
        signal.signal(signal.SIGINT, old)
        if bar is not None:
            bar.close()
    return session.summary()


def _tune_network(args, name, workloads) -> int:
    from . import presets, tvm_env
    from .network import NetworkSession
    from .store import RecordStore

    if args.resume:
        raise WorkbenchError(
            f"--resume works for one workload, not a network ({name!r}): resume a layer with "
            f"'workbench tune {workloads[0].name} --resume', or start the network again"
        )
    if args.runner != "local":
        raise WorkbenchError("a network is measured on the local runner only; drop --runner")
    presets.get(args.preset)
    tvm_env.parse_target(args.target)
    overrides = _preset_overrides(args)
    session = NetworkSession(
        workloads,
        target=args.target,
        trials=args.trials,
        preset=args.preset,
        seed=args.seed,
        db=RecordStore(args.db),
        strategy=args.strategy,
        name=name,
        **overrides,
    )
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=session.trials, desc=name, unit="trial", file=sys.stderr, dynamic_ncols=True)

        def on_event(e):
            if e.kind == K.CANDIDATE_MEASURED:
                bar.update(1)
            elif e.kind == K.NETWORK_ROUND and e.data["estimated_latency_ms"] is not None:
                bar.set_postfix(est=f"{e.data['estimated_latency_ms']:.4g} ms", last=e.data["workload"])
            elif e.kind == K.NETWORK_BASELINE:
                bar.write(f"[{name}] untuned: {e.data['naive_latency_ms']:.4g} ms (sum of weight x latency)")
            elif e.kind in (K.NETWORK_PAUSED, K.NETWORK_RESUMED, K.NETWORK_STOPPED, K.NETWORK_FAILED, K.TASK_DEAD):
                bar.write(f"[{e.kind}] {e.data.get('message', e.data.get('workload', ''))}".rstrip())

        session.subscribe(on_event)

    summ = _run_until_done_or_ctrl_c(session, bar)
    if args.json:
        print(json.dumps(summ))
    else:
        print(
            f"network       {name}  ({len(workloads)} tasks, {summ['status']}, sessions "
            f"{summ['session_ids'][0]}-{summ['session_ids'][-1]})"
        )
        print(
            f"trials        {summ['trials']} of {summ['budget']} in {summ['rounds']} rounds, "
            f"{summ['tuning_seconds']:.1f} s"
        )
        print(f"untuned       {_fmt(summ['naive_latency_ms'], ' ms')}  (sum of weight x latency)")
        print(
            f"estimated     {_fmt(summ['estimated_latency_ms'], ' ms')}  speedup {_fmt(summ['speedup_vs_naive'], 'x')}"
        )
        for t in summ["tasks"]:
            print(
                f"  {t['workload']:28s} x{t['weight']:<2d} trials {t['trials']:4d}  best "
                f"{_fmt(t['best_latency_ms'], ' ms'):>12s}  naive {_fmt(t['naive_latency_ms'], ' ms'):>12s}"
                f"{'  (dead)' if t['dead'] else ''}"
            )
        print(f"records       {summ['db']}")
    return 0 if session.status == "finished" else 130


def _fmt(x, unit=""):
    return "-" if x is None else f"{x:.4g}{unit}"


def _print_summary(s, unit: str = "GFLOPS"):
    print(f"workload      {s['workload']}  (session {s['session_id']}, {s['status']})")
    print(f"trials        {s['trials']} measured, {s['errors']} errors, {s['tuning_seconds']:.1f} s")
    print(f"naive         {_fmt(s['naive_latency_ms'], ' ms')}")
    print(
        f"best          {_fmt(s['best_latency_ms'], ' ms')}  {_fmt(s['best_gflops'], ' ' + unit)}  "
        f"strategy {s['best_strategy']}  verified {s['verified']}  speedup {_fmt(s['speedup_vs_naive'], 'x')}"
    )
    for name, st in s["strategies"].items():
        print(
            f"  {name:16s} best {_fmt(st['best_latency_ms'], ' ms'):>12s}  trials {st['trials']:4d}  verified {st['verified']}"
        )
    print(f"records       {s['db']}")


def cmd_show(args) -> int:
    from .store import RecordStore

    store = RecordStore(args.db, readonly=True)
    summ = store.summary()
    if args.json:
        print(json.dumps(summ))
        return 0
    print(f"{store.path}: {summ['sessions']} sessions, {summ['measured']} measured candidates, {summ['errors']} errors")
    print(f"{'workload':32s} {'measured':>8s} {'errors':>6s} {'best ms':>10s} {'naive ms':>10s} {'speedup':>8s}")
    for name, w in summ["workloads"].items():
        sp = (
            (w.get("naive_latency_ms") / w["best_latency_ms"])
            if (w.get("naive_latency_ms") and w["best_latency_ms"])
            else None
        )
        print(
            f"{name:32s} {w['measured']:8d} {w['errors'] or 0:6d} {_fmt(w['best_latency_ms']):>10s} "
            f"{_fmt(w.get('naive_latency_ms')):>10s} {_fmt(sp, 'x'):>8s}"
        )
    return 0


def cmd_best(args) -> int:
    from . import program, space
    from .store import RecordStore
    from .workloads import workload_from_spec

    store = RecordStore(args.db, readonly=True)
    b = store.best(args.workload)
    if b is None:
        known = sorted({s["workload"] for s in store.sessions()})
        raise WorkbenchError(
            f"no verified program for {args.workload!r} in {args.db!r}"
            + (f"; it has: {', '.join(known)}" if known else "")
        )
    spec = next(s["spec"] for s in store.sessions() if s["id"] == b["session_id"])
    w = workload_from_spec(spec)
    sch = space.schedule_from_trace_json(w, b["trace"])
    out = {
        "workload": w.name,
        "record_id": b["id"],
        "strategy": b["strategy"],
        "latency_ms": b["latency_ms"],
        "gflops": b["gflops"],
        "verified": bool(b["verified"]),
        "tensor_intrinsics": program.tensor_intrinsics(sch),
        "trace": str(sch.trace),
    }
    if args.tir or args.export or args.time:
        from .program import TunedProgram

        prog = TunedProgram.from_store(store, w.name)
        if args.tir or args.export:
            out["tir"] = prog.tir
        if args.export:
            out["exported"] = prog.export(args.export)
        if args.time:
            t = prog.time(threads=args.threads)
            out.update(t, ratio=t["timed_ms"] / b["latency_ms"], stored_spread=b.get("confirm_spread"))
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"# {w.name}: {b['latency_ms']:.4g} ms, {b['gflops']:.4g} {rate_unit(w.dtype)}, strategy {b['strategy']}, "
        f"record {b['id']}, verified {bool(b['verified'])}"
    )
    if out["tensor_intrinsics"]:
        print(f"# tensor intrinsics: {program.intrinsics_line(out['tensor_intrinsics'])}")
    if args.time:
        print(
            f"# timed now: {out['timed_ms']:.4g} ms (spread {out['spread'] or 0:.1%}, {out['repeats']} repeats, "
            f"{out['threads']} threads) = {out['ratio']:.3f}x the stored figure"
            + ("; DISTURBED by other processes: time again on a quiet machine" if out["noisy"] else "")
        )
    print("# trace")
    print(out["trace"])
    if args.tir:
        print("# TIR (the compiled kernel; offline weight rewrites removed)")
        print(out["tir"])
    if args.export:
        print(f"# exported to {out['exported']}")
    return 0


def cmd_export(args) -> int:
    from .metaschedule_db import export_store

    n = export_store(args.db, args.metaschedule)
    print(f"exported {n['records']} records of {n['workloads']} workloads to {args.metaschedule}")
    if n["skipped"]:
        names = ", ".join(sorted({w for _, w, _ in n["skipped"]}))
        print(f"skipped {len(n['skipped'])} sessions whose workload their spec does not rebuild here: {names}")
    return 0


def cmd_import(args) -> int:
    from .metaschedule_db import import_dir
    from .workloads import load_spec_file, registry

    if args.spec:
        ws = [w for w in load_spec_file(args.spec) if w.name == args.workload]
        if not ws:
            raise WorkbenchError(f"{args.spec!r} has no workload named {args.workload!r}")
        w = ws[0]
    else:
        w = registry().get(args.workload)
    n = import_dir(args.dir, args.db, w)
    print(f"imported {n} records for {w.name} into {args.db}")
    return 0


def cmd_report(args) -> int:
    from .report import write_report

    print(f"wrote {write_report(args.db, args.output, args.session, with_tir=not args.no_tir)}")
    return 0


def cmd_transfer(args) -> int:
    from .store import RecordStore
    from .transfer import transfer
    from .workloads import load_spec_file, resolve

    if bool(args.workload) == bool(args.spec):
        raise WorkbenchError("transfer needs a workload or network name, or --spec FILE (one of them)")
    RecordStore(args.source, readonly=True)
    targets = load_spec_file(args.spec) if args.spec else resolve(args.workload)
    results = transfer(args.source, targets, target=args.target, db=args.db)
    # The network line: latencies are sums of weight x latency, an untransferred layer counting with its untuned
    # program; verified: every transferred program was verified (fallback layers run the untuned program).
    total = {
        "workload": args.workload or args.spec,
        "candidates": 0,
        "best_latency_ms": 0.0,
        "naive_latency_ms": 0.0,
        "verified": True,
        "search_seconds": 0.0,
        "source": args.source,
        "transferred": 0,
        "exact_matches": 0,
        "repaired": 0,
        "fallbacks": [],
    }
    for w, r in zip(targets, results):
        d = r.to_dict()
        d.pop("per_candidate")
        total["candidates"] += r.candidates
        total["best_latency_ms"] += w.weight * (r.best_latency_ms or r.naive_latency_ms)
        total["naive_latency_ms"] += w.weight * r.naive_latency_ms
        total["search_seconds"] += r.search_seconds
        if r.best_latency_ms is None:
            total["fallbacks"].append(r.workload)
        else:
            total["verified"] &= r.verified
            total["transferred"] += 1
            total["exact_matches"] += r.exact_match
            total["repaired"] += r.repaired
        if args.json:
            print(json.dumps(dict(d, source=r.source, source_db=args.source)))
        else:
            best = (
                "untuned (no schedule applies)"
                if r.best_latency_ms is None
                else f"{r.best_latency_ms:.4g} ms from {r.source} ({r.source_strategy}{', exact shape' if r.exact_match else ''})"
            )
            print(
                f"{r.workload:32s} {r.valid}/{r.candidates} candidates  naive {r.naive_latency_ms:.4g} ms  best {best}  "
                f"speedup {r.speedup:.1f}x  {r.search_seconds:.1f} s"
            )
    if len(results) == 1:
        return 0
    total["speedup"] = total["naive_latency_ms"] / total["best_latency_ms"] if total["best_latency_ms"] else None
    total["search_seconds"] = round(total["search_seconds"], 2)
    total["workloads"] = [r.workload for r in results]
    print(
        json.dumps(total)
        if args.json
        else f"weighted total: naive {total['naive_latency_ms']:.4g} ms, transferred {total['best_latency_ms']:.4g} ms "
        f"({total['speedup']:.2f}x) in {total['search_seconds']:.0f} s"
    )
    return 0


def _model_from_args(args, rm):
    """The model the ``model`` subcommand's options describe; an option of the other model is a user mistake."""
    own = {"resnet18": ("width", "stages", "layout"), "mobilenet_v2": ("width_mult",)}[args.name]
    if args.dtype == "int8":
        own = tuple(o for o in own if o != "layout")  # the int8 network's layout is fixed (NHWC, for VNNI)
    for opt in ("width", "stages", "width_mult", "layout"):
        if opt not in own and getattr(args, opt) is not None:
            raise WorkbenchError(f"--{opt.replace('_', '-')} does not apply to {args.name} ({args.dtype})")
    table = rm.INT8_MODELS if args.dtype == "int8" else rm.MODELS
    if args.name not in table:
        raise WorkbenchError(f"{args.name} has no {args.dtype} version (int8: {', '.join(rm.INT8_MODELS)} only)")
    kw = {k: getattr(args, k) for k in own if getattr(args, k) is not None}
    return table[args.name](batch=args.batch, image=args.image, seed=args.seed, **kw)


def cmd_model(args) -> int:
    from . import relax_model as rm
    from . import tvm_env
    from .store import RecordStore

    tvm_env.parse_target(args.target)
    model = _model_from_args(args, rm)
    RecordStore(args.db)
    overrides = {"trials_per_round": args.trials_per_round} if args.trials_per_round else {}
    if args.trials is None:
        n = args.max_tasks or len(rm.extract(model, args.target))
        from .presets import get

        args.trials = 2 * (args.trials_per_round or get("quick").trials_per_round) * n

    def progress(e):
        if e.kind == K.NETWORK_ROUND and not args.json:
            print(
                f"round {e.data['round']:3d} {e.data['workload']:40s} trials {e.data['trials_done']:5d}  "
                f"estimated {e.data['estimated_latency_ms']:.4g} ms",
                file=sys.stderr,
                flush=True,
            )

    res = rm.tune_and_compare(
        model,
        trials=args.trials,
        db=args.db,
        target=args.target,
        max_tasks=args.max_tasks,
        strategy=args.strategy,
        seed=args.seed,
        on_event=progress,
        **overrides,
    )
    out = {k: v for k, v in res.items() if k != "session"}
    out.update(
        model=args.name,
        dtype=args.dtype,
        config=model.config,
        trials=res["session"]["trials"],
        db=args.db,
        tuning_seconds=res["session"]["tuning_seconds"],
    )
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{args.name} {model.config}: {len(res['tasks'])} tasks, {len(res['tuned_tasks'])} tuned with "
            f"{out['trials']} trials in {out['tuning_seconds']:.0f} s"
        )
        print(
            f"untuned {res['untuned_latency_ms']:.4g} ms  tuned {res['tuned_latency_ms']:.4g} ms  "
            f"speedup {res['speedup']:.2f}x  outputs match: {res['matches']} (max abs error {res['max_abs_error']:.2g})"
        )
    return 0 if res["matches"] else 1


COMMANDS = {
    "model": cmd_model,
    "workloads": cmd_workloads,
    "tune": cmd_tune,
    "show": cmd_show,
    "best": cmd_best,
    "export": cmd_export,
    "import": cmd_import,
    "transfer": cmd_transfer,
    "report": cmd_report,
}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except WorkbenchError as e:
        sys.stderr.write(f"workbench: error: {e}\n")
        return EXIT_USER
    except sqlite3.DatabaseError as e:  # a damaged store can read fine until the damaged page is reached
        where = getattr(args, "db", None) or getattr(args, "source", None)
        sys.stderr.write(f"workbench: error: records store {where!r} is damaged: {e}\n")
        return EXIT_USER
    except BrokenPipeError:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
