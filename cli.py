"""`verify`: the command line.  It parses and prints; the work is in the `verifier` library.

Exit codes: 0 proved, 1 refuted (counterexample), 2 usage or input error (or an internal error),
3 unknown (timeout, Ctrl-C, partial range).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import click

import verifier
from verifier import exact
from verifier.arithmetic import (
    ACCUMULATES,
    ALL_ROUNDINGS,
    FORMAT_HELP,
    OVERFLOW_HELP,
    OVERFLOWS,
    ROUNDING_HELP,
    ROUNDINGS,
    make_format,
    parse_format,
)
from verifier.constructions import CONSTRUCTIONS
from verifier.engines import ENGINES
from verifier.errata import CLAIMS as ERRATA_CLAIMS
from verifier.errata import run_errata
from verifier.errata import select as errata_select
from verifier.errata import to_json as errata_json
from verifier.errata import to_markdown as errata_markdown
from verifier.errata import to_text as errata_text
from verifier.importers.tracr import compile_program
from verifier.importers.transformer_lens import ROUND_TRIP_TOLERANCE
from verifier.importers.transformer_lens import convert as convert_state_dict
from verifier.modelfile import META_SCHEMA
from verifier.outputs import plots, report
from verifier.outputs.dump import format_trace, prepare_dump_dir, trace_json, write_dumps
from verifier.refute import separation, shapes
from verifier.refute.certificate_check import CERTIFICATE_SCHEMA, check_certificate
from verifier.refute.certificates import find_certificate, why_none
from verifier.refute.certificates import load_checked as load_certificate
from verifier.refute.certificates import save as save_certificate
from verifier.refute.count import EXACT_LIMIT, REPLAY, SAMPLES, count_errors
from verifier.refute.count import METHODS as COUNT_METHODS
from verifier.refute.refute import METHODS, refute, refute_random
from verifier.refute.synthesis import certificate_lines, decide_certificate
from verifier.result import EXIT_CODES, count_text
from verifier.runs.api import build_construction
from verifier.runs.cache import Cache
from verifier.runs.cache import default_path as default_cache_path
from verifier.runs.cluster import Cluster
from verifier.runs.formats import format_table
from verifier.runs.progress import Overall
from verifier.runs.progress import line as progress_line
from verifier.runs.specs import PROFILES, load_specs, spec_schema
from verifier.runs.specs import check as check_specs
from verifier.runs.sweep import RANGE_HELP, Frontier, parse_range, sweep
from verifier.smt.solvers import CHOICES as SOLVER_CHOICES
from verifier.support import interrupts
from verifier.support.budget import Deadline, TimedOut
from verifier.support.errors import InputError, InternalError
from verifier.support.files import new_file
from verifier.support.usercode import NotFinished, time_limit
from verifier.tasks import ALIASES, TASKS, canonical, make_task, task_options
from verifier.tasks.boolean import INSTANCE_SCHEMA
from verifier.tasks.memorization import DATASET_SCHEMA
from verifier.tasks.user import split_names

ENGINE_NAMES = ["auto", *ENGINES]
SCHEMAS = {"model-meta": META_SCHEMA, "instance": INSTANCE_SCHEMA, "dataset": DATASET_SCHEMA, "spec": spec_schema,
           "certificate": CERTIFICATE_SCHEMA}


class FiniteFloat(click.ParamType):
    """A finite real number (click's FLOAT takes nan and inf); `positive` also refuses <= 0."""

    name = "number"

    def __init__(self, positive: bool = False):
        self.positive = positive

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.positive and x <= 0:
            self.fail(f"{value!r} is not positive", param, ctx)
        return x


NUMBER = FiniteFloat()
SECONDS = FiniteFloat(positive=True)


FORMAT_OPTION = click.option("--format", "fmt", default=None, metavar="FORMAT",
                             help=f"The number format: {FORMAT_HELP}. Default fx.")


def arithmetic_options(fn):
    for opt in reversed([
        FORMAT_OPTION,
        click.option("--p", "p", type=int, default=None,
                     help="Bits per number (p >= 2) of --format fx (required there)."),
        click.option("--f", "f", type=int, default=None, help="Fractional bits of --format fx (default p // 2)."),
        click.option("--rounding", type=click.Choice(ALL_ROUNDINGS), default=None, help=ROUNDING_HELP),
        click.option("--overflow", type=click.Choice(OVERFLOWS), default=None, help=OVERFLOW_HELP),
        click.option("--accumulate", type=click.Choice(ACCUMULATES), default="product", show_default=True),
    ]):
        fn = opt(fn)
    return fn


def run_options(fn):
    for opt in reversed([
        click.option("--engine", type=click.Choice(ENGINE_NAMES), default="auto", show_default=True),
        click.option("--solver", type=click.Choice(SOLVER_CHOICES), default="z3", show_default=True,
                     help="The SMT engine's solver; portfolio: every installed one, the first answer wins; "
                          "auto: bitwuzla, or z3 for a case whose formula divides (softmax)."),
        click.option("--smtlib", type=click.Path(file_okay=False), default=None,
                     help="Write each case the SMT engine sends to a solver as SMT-LIB 2 in DIR (with --engine "
                          "smt, smt-bv or smt-int)."),
        click.option("--timeout", type=SECONDS, default=None,
                     help="Seconds for the whole command (building included); past it the verdict is unknown."),
        click.option("--max-counterexamples", type=int, default=1, show_default=True,
                     help="Stop after this many counterexamples."),
        click.option("--start", type=int, default=0, help="First input of the range (enumeration order)."),
        click.option("--stop", type=int, default=None, help="End of the range (exclusive; default: all)."),
        click.option("--workers", type=int, default=None, help="Processes (default: both cores for large spaces)."),
        click.option("--cluster", "cluster_address", default=None,
                     help="Split this run's enumeration over a Dask cluster: local, or a scheduler address "
                          "(tcp://host:8786).  (--scheduler is where a sweep's or a check's runs go.)"),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
        click.option("--dump", type=click.Path(file_okay=False), default=None,
                     help="Write each counterexample, with its full trace, as a JSON file in DIR."),
        click.option("--trace", is_flag=True,
                     help="Show every intermediate of the first counterexample (or of the tightest input)."),
    ]):
        fn = opt(fn)
    return fn


CACHE_OPTIONS = [
    click.option("--cache", "cache_path", type=click.Path(dir_okay=False), default=None,
                 help="SQLite verdict cache (default: $XDG_CACHE_HOME/verify/results.sqlite)."),
    click.option("--no-cache", is_flag=True, help="Decide every run again and store nothing."),
]


def cluster_options(fn):
    """Where a sweep's points or a check's specs run, and the verdict cache they resume from."""
    for opt in reversed([
        click.option("--scheduler", default=None,
                     help="serial, local (a Dask LocalCluster of both cores), or a Dask scheduler address "
                          "(tcp://host:8786). Default: local when Dask is installed, else serial."),
        *CACHE_OPTIONS,
    ]):
        fn = opt(fn)
    return fn


def run_timeout_option(dest: str = "timeout", which: str = ""):
    """--run-timeout: a limit on each run of a command that makes several (--timeout bounds a whole command)."""
    return click.option("--run-timeout", dest, type=SECONDS, default=None,
                        help=f"Seconds for each run{which}; past it that run's verdict is unknown.")


def refuse_given(names, why: str) -> None:
    """InputError naming the options among `names` (parameter names) the user gave (click's parameter
    source: an option given at its default value counts as given)."""
    ctx = click.get_current_context()
    flags = [next(max(p.opts, key=len) for p in ctx.command.params if p.name == name)
             for name in names if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)]
    if flags:
        raise InputError(f"{', '.join(flags)}: {why}")


FORCE = click.option("--force", is_flag=True, help="Replace the files this command writes if they exist (never by "
                                                    "default).")


def open_cache(cache_path: str | None, no_cache: bool) -> Cache | None:
    if no_cache and cache_path:
        raise InputError("give --cache or --no-cache, not both")
    return None if no_cache else Cache(cache_path or default_cache_path())


CONSTRUCTION_OPTIONS = {
    "variant": click.option("--variant", default=None,
                            help="paper (as printed) or corrected (the default); see verify list."),
    "k": click.option("--k", "k", type=int, default=None, help="Width of the sign vectors T (default: rule)."),
    "eta": click.option("--eta", type=NUMBER, default=None, help="Attention scale (default: the paper's rule)."),
    "seed": click.option("--seed", type=int, default=0, show_default=True,
                         help="Seed of the construction's random sign vectors (the searches' is --search-seed)."),
}


def construction_options(names=tuple(CONSTRUCTION_OPTIONS)):
    """Click options for a construction's parameters (those it takes: `Construction.options`)."""
    def wrap(fn):
        for name in reversed(names):
            fn = CONSTRUCTION_OPTIONS[name](fn)
        return fn
    return wrap


def _merged_task_options() -> list:
    """Every task's options once; an option that tasks default differently shows no single default."""
    merged: dict = {}
    for o in (o for t in TASKS.values() for o in t.OPTIONS):
        seen = merged.get(o.name)
        if seen is not None and (seen.default is None or seen.default != o.default):
            o = seen if seen.default is None else dataclasses.replace(
                seen, default=None, help=seen.help.rstrip(".") + " (default: the task's).")
        merged[o.name] = o
    return list(merged.values())


ALL_TASK_OPTIONS = _merged_task_options()


def task_option_flags(options):
    """Click options for a task's own parameters (sigma, s, dim, ...); None when not given."""
    def wrap(fn):
        for o in reversed(options):
            if o.type is bool:
                fn = click.option(o.flag, o.name, is_flag=True, default=None, help=o.help)(fn)
            else:
                fn = click.option(o.flag, o.name, type=NUMBER if o.type is float else o.type, default=None, help=o.help
                                  + (f" [default: {o.default}]" if o.default is not None else ""))(fn)
        return fn
    return wrap


class Progress:
    """The progress line on stderr, only on a terminal and only after two seconds."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.shown = False
        self.tty = sys.stderr.isatty()

    def __call__(self, tick) -> None:
        elapsed = time.monotonic() - self.t0
        if not self.tty or elapsed < 2:
            return
        sys.stderr.write("\r\x1b[K" + progress_line(tick, elapsed))
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


HEARTBEAT = 30.0  # seconds between overall progress lines when stderr is not a terminal


class StatusLine:
    """Where the overall line of a sweep or a check goes (`progress.Overall`): on a terminal, one
    line on stderr rewritten in place every second and cleared before other output; elsewhere (a
    log file, a pipe), a line every HEARTBEAT seconds."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.lock = threading.Lock()
        self.shown = False

    def overall(self, noun: str) -> Overall:
        return Overall(noun, self.write, every=1.0 if self.tty else HEARTBEAT)

    def write(self, text: str) -> None:
        with self.lock:
            sys.stderr.write("\r\x1b[K" + text if self.tty else text + "\n")
            sys.stderr.flush()
            self.shown = self.tty

    def echo(self, line: str, err: bool = False) -> None:
        """A line of output, after the status line is cleared."""
        self.clear()
        click.echo(line, err=err)

    def clear(self) -> None:
        with self.lock:
            if self.shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
                self.shown = False


def decide(problem, engine, deadline, max_counterexamples, start, stop, workers, cluster_address, as_json, dump,
           want_trace, solver="z3", smtlib=None) -> int:
    if dump:
        prepare_dump_dir(dump)
    progress = Progress()
    try:
        with Cluster(cluster_address) if cluster_address else contextlib.nullcontext() as cluster:
            result = verifier.run(problem, engine, max_counterexamples=max_counterexamples, deadline=deadline,
                                  start=start, stop=stop, workers=workers, progress=progress, cluster=cluster,
                                  solver=solver, smtlib=smtlib)
    finally:
        progress.close()
    dumps = write_dumps(result, dump) if dump and result.counterexamples else []
    traced = None
    if want_trace:
        if result.counterexamples:
            traced = result.counterexamples[0].trace
        elif result.tightest is not None:
            traced = verifier.explain(problem, problem.task.decode(result.tightest["index"])).table
    if as_json:
        doc = result.to_json()
        doc["dumps"] = [str(p) for p in dumps]
        if traced is not None:
            doc["trace"] = trace_json(traced)
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(result.summary())
        for p in dumps:
            click.echo(f"  dumped      {p}")
        if traced is not None:
            which = "first counterexample" if result.counterexamples else f"tightest input {result.tightest['input']}"
            click.echo(f"\ntrace of the {which} (fx = the value in the format, real = unquantized float64):")
            click.echo(format_trace(traced, result.residual_rows, result.arithmetic["step"]))
    return result.exit_code


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="verify", prog_name="verify", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Finite-precision verifier for hand-constructed transformer weights."""
    if ctx.invoked_subcommand is None:  # a bare `verify` asks what there is: the help, exit 0
        click.echo(ctx.get_help())


def _task_command(task_name: str, name: str) -> None:
    construction = CONSTRUCTIONS[task_name]
    size_flags = TASKS[task_name].SIZE_FLAGS

    @cli.command(name, help=f"Prove the built-in {task_name} construction ({construction.theorem}) on every input "
                            f"up to size N.")
    @click.option("--N", *size_flags, "N", type=int, required=True,
                  help=f"Size of the task ({TASKS[task_name].SIZE_HELP}"
                       + (f"; also {', '.join(size_flags)}" if size_flags else "") + ").")
    @task_option_flags(task_options(task_name))
    @arithmetic_options
    @construction_options(construction.options)
    @run_options
    def command(N, fmt, p, f, rounding, overflow, accumulate, engine, solver, smtlib, timeout, max_counterexamples,
                start, stop, workers, cluster_address, as_json, dump, trace, **options):
        deadline = Deadline(timeout)
        with deadline.enforced():
            problem = verifier.build_problem(task_name, N=N, arith=fmt, p=p, f=f, rounding=rounding,
                                             overflow=overflow, accumulate=accumulate, **options)
        return decide(problem, engine, deadline, max_counterexamples, start, stop, workers, cluster_address, as_json,
                      dump, trace, solver, smtlib)


for _name in [*TASKS, *ALIASES]:
    if canonical(_name) in CONSTRUCTIONS:  # the user's own tasks have no built-in construction
        _task_command(canonical(_name), _name)


@cli.command("run")
@click.option("--model", "model_path", type=click.Path(dir_okay=False), required=True, help="A .npz model file.")
@click.option("--task", "task_name", required=True, help="The task the model should solve (e.g. idxl).")
@click.option("--N", "N", type=int, required=True, help="Size of the task (largest input length).")
@task_option_flags(ALL_TASK_OPTIONS)
@arithmetic_options
@run_options
def run_cmd(model_path, task_name, N, fmt, p, f, rounding, overflow, accumulate, engine, solver, smtlib, timeout,
            max_counterexamples, start, stop, workers, cluster_address, as_json, dump, trace, **options):
    """Verify a model from a file (docs/model-format.md) on a task."""
    deadline = Deadline(timeout)
    parse_format(fmt)  # a bad --format fails before the model file is read
    with deadline.enforced(), time_limit(deadline):  # a reference function is the user's code: --timeout bounds it
        model = verifier.load_model(model_path)
        problem = verifier.build_problem(task_name, N=N, arith=fmt, p=p, f=f, rounding=rounding, overflow=overflow,
                                         accumulate=accumulate, model=model, **options)
    return decide(problem, engine, deadline, max_counterexamples, start, stop, workers, cluster_address, as_json,
                  dump, trace, solver, smtlib)


@cli.command("exact")
@click.argument("task_name")
@click.option("--N", "N", type=int, required=True, help="Size of the task (largest input length).")
@task_option_flags(ALL_TASK_OPTIONS)
@construction_options()
@click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None,
              help="A .npz model file instead of the built-in construction.")
@click.option("--p", "p", type=int, default=12, show_default=True,
              help="The precision the construction is built for (its scales may depend on --f); not used to evaluate.")
@click.option("--f", "f", type=int, default=None,
              help="Fractional bits the construction is built for (default p // 2).")
@click.option("--start", type=int, default=0, help="First input of the range (enumeration order).")
@click.option("--stop", type=int, default=None, help="End of the range (exclusive; default: all).")
@click.option("--max-counterexamples", type=int, default=None,
              help="Stop after this many inputs wrong in exact arithmetic (default: decide every input).")
@click.option("--max-prec", type=click.IntRange(64, 1 << 16), default=exact.MAX_PREC, show_default=True,
              help="Bits of the exp enclosures past which an input is reported undecided.")
@click.option("--show", type=click.IntRange(0), default=1, show_default=True, help="Wrong inputs to print.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def exact_cmd(task_name, N, variant, k, eta, seed, model_path, p, f, start, stop, max_counterexamples, max_prec, show,
              as_json, **options):
    """Decide every input of a task in exact arithmetic (the unquantized model, no rounding): exit 0
    if all are right, 1 if one is wrong, 3 if some are undecided or only a range was covered."""
    model = verifier.load_model(model_path) if model_path else None
    problem = verifier.build_problem(task_name, N=N, p=p, f=f, variant=variant, k=k, eta=eta,
                                     **({"seed": seed} if model is None else {}), model=model, **options)
    if not 0 <= start <= (problem.task.total if stop is None else stop) <= problem.task.total:
        raise InputError(f"the range {start}..{stop} is not inside 0..{problem.task.total}")
    found = exact.search(problem, start, stop, max_counterexamples, max_prec=max_prec)
    click.echo(json.dumps(found.to_json(problem), indent=2) if as_json else found.summary(problem, show))
    return found.exit_code


@cli.command("export")
@click.argument("task_name")
@click.option("--N", "N", type=int, required=True, help="Size of the task (largest input length).")
@task_option_flags(ALL_TASK_OPTIONS)
@construction_options()
@FORMAT_OPTION
@click.option("--f", "f", type=int, default=None,
              help="Fractional bits of --format fx: the paper variants' eta depends on the precision (Kc).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="The .npz file to write.")
@FORCE
def export_cmd(task_name, N, variant, k, eta, seed, fmt, f, output, force, **options):
    """Write a built-in construction as a model file (never overwrites without --force)."""
    model = build_construction(task_name, N=N, arith=fmt, f=f, variant=variant, k=k, eta=eta, seed=seed, **options)
    path = verifier.save_model(model, output, force)
    name = canonical(task_name)
    variant = model.info.get("variant", CONSTRUCTIONS[name].default)
    quantization = model.quantization if isinstance(model, verifier.Model) else None  # a recurrent model has none
    scales = "" if quantization is None else f", int8 scales of {len(quantization)} tensors (calibrated)"
    click.echo(f"wrote {path}: {model.info['construction']} construction ({variant} variant), task {name}, N={N}, "
               f"d={model.d}, {model.n_params()} parameters{scales}")
    return 0


def tracr_options(fn):
    """How a RASP program is compiled by Tracr (`verify tracr`, `verify sweep tracr`)."""
    for opt in reversed([
        click.option("--max-len", "max_len", type=int, default=None,
                     help="The longest input (Tracr's max_seq_len); required for a Tracr program."),
        click.option("--causal", is_flag=True, help="Compile the Tracr program with causal attention."),
        click.option("--mlp-exactness", "mlp_exactness", type=click.IntRange(min=1), default=100, show_default=True,
                     help="Tracr's MLP approximation parameter (larger: sharper, larger weights)."),
    ]):
        fn = opt(fn)
    return fn


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def compile_tracr(program: str, vocab, max_len, causal: bool, mlp_exactness: int):
    if vocab is None or max_len is None:
        raise InputError("a Tracr program needs --vocab a,b,c and --max-len N")
    compiled = compile_program(program, split_names(vocab, "--vocab"), max_len, causal=causal,
                               mlp_exactness=mlp_exactness)
    click.echo(f"compiled {program} with Tracr: d={compiled.model.d}, {_count(len(compiled.model.layers), 'layer')}, "
               f"{compiled.model.n_params()} parameters; float64 round trip against Tracr's forward pass: "
               f"largest difference {compiled.round_trip_error:.3g}", err=True)
    return compiled


def table_format(as_json: bool, as_csv: bool) -> str | None:
    """The table format a sweep prints: json, csv, or None (markdown)."""
    if as_json and as_csv:
        raise InputError("give --json or --csv, not both")
    return "json" if as_json else "csv" if as_csv else None


def sweep_frontier(task, Ns, ps, f_range, int_bits, output, fmt, plot_path, scheduler, cache_path, no_cache, force,
                   **problem) -> int:
    """Run a sweep (`verifier.sweep.sweep`) and print (and write) its table (`fmt`: json, csv or None
    for markdown); exit 3 when it was interrupted."""
    fs = parse_range(f_range, "--f") if f_range is not None else [None]
    if output and not output.endswith((".csv", ".json")):
        raise InputError("-o must end in .csv or .json")
    if len(fs) > 1 and (plot_path or fmt == "csv" or (output or "").endswith(".csv")):
        raise InputError("a range of --f makes a table by f: no --plot or CSV (-o FILE.json or --json)")
    if plot_path:
        plots.check_output(plot_path, force)
    cache = open_cache(cache_path, no_cache)
    status = StatusLine()
    with new_file(output, force=force) if output else contextlib.nullcontext() as fh, \
            new_file(plot_path, binary=True, force=force) if plot_path else contextlib.nullcontext() as figure:
        table = sweep(task, Ns, ps, fs, int_bits=int_bits, **problem, progress=lambda line: status.echo(line, err=True),
                      overall=status.overall("runs"), scheduler=scheduler, cache=cache)
        status.clear()
        click.echo(f"ran on {table.ran_on}" + (f"; {cache.hits} of the runs read from the cache {cache.path}"
                                                + (f" ({cache.rejected} rows not used)" if cache.rejected else "")
                                                if cache is not None else ""), err=True)
        render: dict[str, Callable[[], str]] = {"markdown": table.to_markdown,
                                                "json": lambda: json.dumps(table.to_json(), indent=2)}
        if isinstance(table, Frontier):  # a table by f has no CSV (refused above)
            render["csv"] = table.to_csv
        if fh is not None:
            fh.write(render["json" if output.endswith(".json") else "csv"]())
            click.echo(f"wrote {output}", err=True)
        click.echo(render[fmt or "markdown"]())
        if figure is not None:
            click.echo(f"wrote {plots.save(plots.frontier_figure([table.to_json()]), plot_path, figure)}", err=True)
    return table.exit_code


SWEEP_OUTPUT = [
    click.option("--int-bits", "int_bits", type=int, default=None,
                 help="Integer bits, fixed: f = p - INT_BITS at each p (p* then measures fraction bits)."),
    click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                 help="Write the table here (.csv or .json; never overwrites without --force)."),
    click.option("--csv", "as_csv", is_flag=True,
                 help="Print the table as CSV (default markdown; --json: JSON; "
                      "the suffix of -o decides for the file)."),
    click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
                 help="Also draw p* against log2 N with the fit, as .png or .svg (needs matplotlib)."),
    FORCE,
]


def sweep_output_options(fn):
    for opt in reversed(SWEEP_OUTPUT):
        fn = opt(fn)
    return fn


@cli.command("sweep")
@click.argument("task_name", required=False)
@click.option("--task", "task_option", default=None, help="The task (instead of TASK_NAME), e.g. with --model.")
@click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None,
              help="Sweep this model file instead of the built-in construction.")
@click.option("--program", default=None, help="With TASK_NAME tracr: the RASP program (as for verify tracr).")
@click.option("--N", "N_range", default=None, help=f"The N: {RANGE_HELP} (a Tracr program: its --max-len).")
@click.option("--p", "p_range", default=None,
              help=f"The p: {RANGE_HELP} (required without --format; with --format, the one p of fx).")
@click.option("--format", "formats", default=None, metavar="FORMATS",
              help="Instead of --p: formats, comma-separated (e.g. bf16,fp16,e4m3,e5m2): the verdict at each N and "
                   "format, the smallest format that proves at each N with the counterexample of the one just below "
                   "it, and each failing format's counterexample.")
@click.option("--f", "f_range", default=None,
              help=f"Fractional bits (default p // 2 for each p): {RANGE_HELP}; several, with one N, give p* at "
                   f"each f and the smallest format.")
@click.option("--rounding", type=click.Choice(ALL_ROUNDINGS), default=None, help=ROUNDING_HELP)
@click.option("--overflow", type=click.Choice(OVERFLOWS), default=None, help=OVERFLOW_HELP)
@click.option("--accumulate", type=click.Choice(ACCUMULATES), default="product", show_default=True)
@task_option_flags(ALL_TASK_OPTIONS)
@construction_options(("variant", "eta", "seed"))
@click.option("--k", "k_range", default=None,
              help=f"Width of the sign vectors T (default: rule): {RANGE_HELP}; several, with one --p, give k* (the "
                   f"smallest width that proves) for each N.")
@tracr_options
@click.option("--engine", type=click.Choice(ENGINE_NAMES), default="auto", show_default=True)
@run_timeout_option(which=" (each (N, p))")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
@sweep_output_options
@cluster_options
def sweep_cmd(task_name, task_option, model_path, program, N_range, p_range, formats, f_range, rounding, overflow,
              accumulate, variant, k_range, eta, seed, max_len, causal, mlp_exactness, engine, timeout, **rest):
    """The precision frontier: smallest p that proves the construction (or --model, or a Tracr
    program: verify sweep tracr --program lib:make_length --vocab a,b,c --max-len 4), for each N.

    The (N, p) points run as Dask tasks; their verdicts are cached, so the same command run again
    (after Ctrl-C, say) resumes.  Exit 0 when every run finished; 3 when the sweep was interrupted
    (the table is marked partial)."""
    if (task_name is None) == (task_option is None):
        raise InputError("give the task once: as TASK_NAME or as --task")
    task_name = task_name or task_option
    options = {o.name: rest.pop(o.name) for o in ALL_TASK_OPTIONS}
    ks = parse_range(k_range, "--k") if k_range is not None else None
    k, ks = (ks[0], None) if ks is not None and len(ks) == 1 else (None, ks)
    if formats is not None:
        if ks:
            raise InputError("--format compares formats at one width: give one --k")
        refuse_given(("f_range", "accumulate", "int_bits", "output", "as_csv", "plot_path", "scheduler", "cache_path",
                      "no_cache", "force", "cluster_address"),
                     "a sweep over --p's; with --format each format is run once at each N")
    elif p_range is None:
        raise InputError("give --p (a range of bits) or --format (formats to compare)")
    construction = dict(variant=variant, k=k, eta=eta, seed=seed, **({"ks": ks} if ks else {}))
    if task_name == "tracr":
        if program is None or model_path is not None or N_range is not None:
            raise InputError("verify sweep tracr takes --program, --vocab and --max-len (not --model or --N)")
        refuse_given([*(o for o in options if o != "vocab"), "variant", "k_range", "eta", "seed"],
                     "a Tracr program takes no task or construction options")
        with time_limit(Deadline(timeout)):  # compiling is building the runs, which --timeout bounds
            compiled = compile_tracr(program, options["vocab"], max_len, causal, mlp_exactness)
        task, Ns, model, options, construction = compiled.task, [max_len], compiled.model, {}, {}
    else:
        if program is not None or max_len is not None:
            raise InputError("--program and --max-len are for verify sweep tracr")
        if N_range is None:
            raise InputError("--N is required (a range like 2..16)")
        task, Ns = task_name, parse_range(N_range, "--N")
        model = verifier.load_model(model_path) if model_path else None
    if formats is not None:
        given = {k: v for k, v in {**({} if model else construction), **options}.items() if v is not None}
        ps = parse_range(p_range, "--p") if p_range is not None else [None]
        if len(ps) > 1:
            raise InputError("with --format, --p is fx's one width (e.g. --format fx,bf16,int8 --p 12)")
        table = format_table(task, Ns, [f.strip() for f in formats.split(",")], model=model, rounding=rounding,
                             overflow=overflow, engine=engine, timeout=timeout, p=ps[0], **given)
        click.echo(json.dumps(table.to_json(), indent=2) if rest["as_json"] else "\n".join(table.lines()))
        return table.exit_code
    rest["fmt"] = table_format(rest.pop("as_json"), rest.pop("as_csv"))
    return sweep_frontier(task, Ns, parse_range(p_range, "--p"), f_range, model=model, rounding=rounding or "floor",
                          overflow=overflow or "saturate", accumulate=accumulate, engine=engine, timeout=timeout,
                          **construction, **options, **rest)


@cli.command("tracr")
@click.argument("program")
@click.option("--vocab", required=True, help="The program's tokens, comma-separated: a,b,c (in token-id order).")
@tracr_options
@click.option("--p", "p_range", default="2..24", show_default=True,
              help=f"Bits: {RANGE_HELP}.  One p verifies at p; several find the smallest p that proves the program.")
@click.option("--f", "f_range", default=None,
              help=f"Fractional bits (default p // 2): {RANGE_HELP}; several find p* at each f and the smallest "
                   f"format.")
@click.option("--format", "fmt", default=None, metavar="FORMAT",
              help="Verify in this format instead of FX(p, f) (one run; e.g. bf16, e4m3+fp16acc): " + FORMAT_HELP)
@click.option("--rounding", type=click.Choice(ALL_ROUNDINGS), default=None, help=ROUNDING_HELP)
@click.option("--overflow", type=click.Choice(OVERFLOWS), default=None, help=OVERFLOW_HELP)
@click.option("--accumulate", type=click.Choice(ACCUMULATES), default="product", show_default=True)
@click.option("--save", type=click.Path(dir_okay=False), default=None,
              help="Also write the converted model as a model file (never overwrites without --force).")
@run_options
@run_timeout_option("run_timeout", " (each p)")
@sweep_output_options
@cluster_options
def tracr_cmd(program, vocab, max_len, causal, mlp_exactness, p_range, f_range, fmt, rounding, overflow, accumulate,
              save, engine, solver, smtlib, timeout, max_counterexamples, start, stop, workers, cluster_address,
              as_json, dump, trace, run_timeout, int_bits, output, as_csv, plot_path, force, scheduler, cache_path,
              no_cache):
    """Compile a RASP program with Tracr and verify the compiled weights against the RASP evaluator's
    own answers, on every input up to --max-len.  PROGRAM: lib:make_length (Tracr's library; its SOp
    arguments get rasp.tokens) or program.py[:NAME] (a SOp, or a function that returns one).

    One --p: the verdict (exit 0 proved, 1 refuted, 3 unknown).  A range of p: p*, the smallest p
    that proves it, and the counterexample at p* - 1; with a range of f too, p* at each f (--json,
    --csv: the table as JSON or CSV)."""
    deadline = Deadline(timeout)
    if fmt is not None:
        refuse_given(("p_range", "f_range"), "--format gives the whole format (one run)")
        parse_format(fmt)  # a bad format fails before Tracr compiles
    ps = [None] if fmt is not None else parse_range(p_range, "--p")
    fs = parse_range(f_range, "--f") if f_range is not None else [None]
    if len(ps) == 1:
        refuse_given(("int_bits", "output", "plot_path", "as_csv", "run_timeout", "scheduler", "cache_path"),
                     "only with a range of p (a single run reads and writes no cache)")
        if force and not save:
            raise InputError("--force replaces the files -o, --plot and --save write: give one")
        if len(fs) > 1:
            raise InputError("a range of --f is for a range of p")
    else:
        refuse_given(("max_counterexamples", "start", "stop", "workers", "cluster_address", "dump", "trace",
                           "solver", "smtlib", "timeout"),
                     "a single run's options: with a range of p, verify tracr finds p* (each run's limit: "
                     "--run-timeout)")
    with time_limit(deadline):
        compiled = compile_tracr(program, vocab, max_len, causal, mlp_exactness)
    if save:
        click.echo(f"wrote {verifier.save_model(compiled.model, save, force)}", err=True)
    arith = dict(rounding=rounding, overflow=overflow, accumulate=accumulate)
    if len(ps) > 1:  # the frontier's cache keys name fixed point's rules
        arith.update(rounding=rounding or "floor", overflow=overflow or "saturate")
    if len(ps) == 1:
        with deadline.enforced():
            problem = verifier.build_problem(compiled.task, p=ps[0], f=fs[0], arith=fmt, model=compiled.model,
                                             **arith)
        return decide(problem, engine, deadline, max_counterexamples, start, stop, workers, cluster_address, as_json,
                      dump, trace, solver, smtlib)
    return sweep_frontier(compiled.task, [max_len], ps, f_range, int_bits, output, table_format(as_json, as_csv),
                          plot_path, scheduler, cache_path, no_cache, force, model=compiled.model, engine=engine,
                          timeout=run_timeout, **arith)


@cli.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="The model file to write (.npz; never overwrites without --force).")
@click.option("--vocab", required=True, help="The tokens of embed.W_E's rows, comma-separated, in row order.")
@click.option("--act", type=click.Choice(["relu", "gelu"]), default=None,
              help="The MLPs' activation (required with MLPs; gelu is refused: no exact rounding rule).")
@click.option("--bidirectional", is_flag=True, help="Attention is not causal (TransformerLens's default is causal).")
@click.option("--bos", default=None, help="A token of --vocab fixed at position 0 before every input.")
@click.option("--rows", default=None,
              help="Names of unembed.W_U's columns, comma-separated (default: --vocab, when it has as many).")
@click.option("--positions", type=click.Choice(["last", "all"]), default="last", show_default=True,
              help="Read the answer at the last position, or at every position (after BOS).")
@click.option("--attn-scale", "attn_scale", type=SECONDS, default=None,
              help="What attention scores are divided by (default sqrt(d_head), TransformerLens's).")
@FORCE
def import_cmd(path, output, vocab, act, bidirectional, bos, rows, positions, attn_scale, force):
    """Convert a state dict in TransformerLens naming (.safetensors, or .pt/.pth through torch's
    weights-only loader) to a model file, after checking the conversion's float64 forward pass."""
    imported = convert_state_dict(path, split_names(vocab, "--vocab"), activation=act, causal=not bidirectional,
                                  bos=bos, rows=split_names(rows, "--rows") if rows is not None else None,
                                  positions=positions, attn_scale=attn_scale)
    model = imported.model
    written = verifier.save_model(model, output, force)
    heads = "/".join(str(len(l.heads)) for l in model.layers)
    mlps = sum(l.has_ffn for l in model.layers)
    click.echo(f"imported {path} (TransformerLens naming): {_count(len(model.layers), 'layer')}, heads {heads}, "
               f"d={model.d}, {_count(mlps, 'ReLU MLP')}, {'bidirectional' if bidirectional else 'causal'} attention, "
               f"{model.n_params()} parameters"
               + (f"; skipped the buffers {', '.join(imported.skipped)}" if imported.skipped else ""))
    click.echo(f"float64 round trip against the TransformerLens forward pass: largest difference "
               f"{imported.round_trip_error:.3g}, with activations up to {imported.round_trip_scale:.3g} (tolerance "
               f"{ROUND_TRIP_TOLERANCE:g} x that, at least 1)")
    click.echo(f"wrote {written}")
    return 0


@cli.command("plot")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="The figure: .png or .svg.")
@FORCE
def plot_cmd(paths, output, force):
    """Draw sweeps (sweep -o X.json; several go on one figure) or a counterexample's attention weights,
    FX against real, per head (a dump from --dump DIR).  Needs matplotlib (verify[plot])."""
    plots.check_output(output, force)
    docs = [report.load(p) for p in paths]
    kinds = {kind for kind, _ in docs}
    if kinds == {"sweep"}:
        fig = plots.frontier_figure([doc for _, doc in docs])
    elif kinds == {"dump"} and len(docs) == 1:
        fig = plots.attention_figure(docs[0][1])
    else:
        raise InputError("verify plot draws sweeps (one or more sweep JSON files) or one counterexample dump")
    click.echo(f"wrote {plots.save(fig, output, force=force)}")
    return 0


@cli.command("report")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="The .html file to write.")
@FORCE
def report_cmd(path, output, force):
    """One self-contained HTML page of a verdict (--json), a counterexample dump (--dump) or a sweep
    (sweep -o X.json): the verdict and its arithmetic, the frontier figure, the trace with the first
    FX departure marked, and the attention heatmaps."""
    kind, doc = report.load(path)
    if not output.endswith((".html", ".htm")):
        raise InputError("-o must end in .html")
    with new_file(output, force=force) as fh:
        fh.write(report.render(kind, doc, source=Path(path).name))
    click.echo(f"wrote {output} ({kind} report)")
    return 0


@cli.command("check")
@click.argument("paths", nargs=-1, required=True)
@click.option("--profile", type=click.Choice(PROFILES), default=None, help="Run only this profile's specs.")
@click.option("--engine", type=click.Choice(ENGINE_NAMES), default=None, help="Override every spec's engine.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@cluster_options
def check_cmd(paths, profile, engine, as_json, scheduler, cache_path, no_cache):
    """Run proof obligations (specs/*.toml); exit 1 if any verdict differs from the expected one.

    The specs run as Dask tasks; their verdicts are cached.  Exit 2 when no spec is selected (a check
    that runs nothing cannot pass), 3 when interrupted."""
    cache = open_cache(cache_path, no_cache)
    specs = load_specs(list(paths))
    width = max(len(s.name) for s in specs) + 1
    header = f"{'spec':<{width}} {'expect':<8} {'got':<8} {'inputs':>21} {'seconds':>8}  ok"
    if not as_json:
        click.echo(header)

    status = StatusLine()

    def show(o):
        if as_json:
            return
        inputs = f"{count_text(o.result.covered)}/{count_text(o.result.total)}" if o.result else "-"
        cached = o.result is not None and o.result.cached
        status.echo(f"{o.spec.name:<{width}} {o.spec.expect:<8} {o.verdict:<8} {inputs:>21} "
                    f"{'cached' if cached else f'{o.seconds:.2f}':>8}  {'ok' if o.ok else 'FAIL'}"
                    + (f"  {o.error}" if o.error else ""))

    done = check_specs(specs, profile, engine, progress=show, scheduler=scheduler, cache=cache,
                       overall=status.overall("specs"))
    status.clear()
    outcomes, failed = done.outcomes, done.failed
    if as_json:
        click.echo(json.dumps(done.to_json(), indent=2))
    else:
        if done.skipped:
            click.echo(f"skipped (not in profile {profile}): {', '.join(s.name for s in done.skipped)}")
        if done.interrupted:
            click.echo(f"interrupted ({interrupts.cause()}): unknown for {', '.join(done.interrupted)}; "
                       f"{len(outcomes)} spec{'s' if len(outcomes) != 1 else ''} finished")
        click.echo(f"{len(outcomes) - len(failed)} of {len(outcomes)} specs got the expected verdict"
                   + (f"; FAILED: {', '.join(o.spec.name for o in failed)}" if failed else "")
                   + f"; ran on {done.ran_on}" + (f"; {cache.hits} read from the cache {cache.path}" if cache else ""))
    return done.exit_code


@cli.command("errata")
@click.option("--p", "p", type=int, default=12, show_default=True,
              help="Bits of the binary fixed point FX(p, p // 2) (a row that needs more states its own).")
@click.option("--row", "rows", multiple=True, help="Only this row (repeatable); the rows: "
              + ", ".join(c.key for c in ERRATA_CLAIMS) + ".")
@click.option("--dump", type=click.Path(file_okay=False), default="errata-dumps", show_default=True,
              help="Directory for the FX counterexamples of the printed variants (new files only).")
@click.option("--engine", type=click.Choice(ENGINE_NAMES), default="auto", show_default=True)
@run_timeout_option()
@click.option("--details", is_flag=True, help="Every row in full: the quote, the reading and each finding.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def errata_cmd(p, rows, dump, engine, timeout, details, as_json):
    """Each printed construction (Bhattamishra et al. 2024; Chen and Zou 2024; Sanford, Hsu, Telgarsky 2024b
    as transcribed), quoted, decided in exact arithmetic, in the paper's own precision model and in binary
    fixed point, and classified by what that evidence supports."""
    if details and as_json:
        raise InputError("--details and --json are two outputs: give one")
    claims = errata_select(list(rows)) if rows else None
    decided = run_errata(p, dump, engine, timeout, claims, progress=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(errata_json(decided), indent=2) if as_json
               else errata_text(decided) if details else errata_markdown(decided))
    return 0


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def list_cmd(as_json):
    """Every task, its construction, the theorem, and the construction's variants."""
    if as_json:
        click.echo(json.dumps({name: {
            "aliases": [a for a, t in ALIASES.items() if t == name], "options": [o.flag for o in task.OPTIONS],
            "size_flags": ["--N", *task.SIZE_FLAGS],
            "construction": None if name not in CONSTRUCTIONS else {
                "name": CONSTRUCTIONS[name].name, "theorem": CONSTRUCTIONS[name].theorem,
                "default": CONSTRUCTIONS[name].default, "variants": CONSTRUCTIONS[name].variants,
                "unbuildable": CONSTRUCTIONS[name].unbuildable}} for name, task in TASKS.items()}, indent=2))
        return 0
    for name, task in TASKS.items():
        aliases = [a for a, t in ALIASES.items() if t == name]
        opts = " ".join(o.flag for o in task.OPTIONS)
        if name not in CONSTRUCTIONS:
            click.echo(f"{name}: the user's own task, for verify run --model and sweep --model; options {opts}")
            continue
        c = CONSTRUCTIONS[name]
        size = task.SIZE_FLAGS
        click.echo(f"{name}{' (' + ', '.join(aliases) + ')' if aliases else ''}: construction {c.name}, "
                   f"{c.theorem}" + (f"; options {opts}" if opts else "")
                   + (f"; --N is also {' '.join(size)}" if size else ""))
        width = max(map(len, [*c.variants, *c.unbuildable])) + 1
        for v, what in c.variants.items():
            click.echo(f"  --variant {v:<{width}}{'(default) ' if v == c.default else ''}{what}")
        for v, why in c.unbuildable.items():
            click.echo(f"  --variant {v:<{width}}cannot be built: {why.split('. ')[0]}.")
    return 0


SIZE = click.option("--N", "N", type=int, required=True,
                    help="Size of the task (the paper's k for the context pairs or blocks of icqa and ictm).")


def _task(task_name: str, N: int, options: dict):
    return make_task(task_name, N=N, **{k: v for k, v in options.items() if v is not None})


@cli.command("certificate")
@click.argument("task_name")
@SIZE
@task_option_flags(ALL_TASK_OPTIONS)
@click.option("--search-seed", "seed", type=int, default=0, show_default=True,
              help="Seed of the examples searched around (--seed is a construction's).")
@click.option("--tries", type=int, default=200, show_default=True, help="Examples to search around.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the certificate as JSON (never overwrites without --force).")
@click.option("--json", "as_json", is_flag=True, help="Print the certificate as JSON.")
@FORCE
def certificate_cmd(task_name, N, seed, tries, output, as_json, force, **options):
    """A dependent set with a label contradiction: inputs every 1-layer model in scope gets one of wrong.

    Exit 0 when one is found, 3 when the search finds none (where the theorem does not apply)."""
    task = _task(task_name, N, options)
    if tries < 1:
        raise InputError(f"--tries must be >= 1, got {tries}")
    cert = find_certificate(task, seed, tries)
    if cert is None:
        click.echo(f"no certificate found around {tries} examples of {task.name}: {why_none(task)}")
        return 3
    if output:
        save_certificate(cert, output, force)
    click.echo(json.dumps(cert.to_json(), indent=1) if as_json else "\n".join(cert.lines()))
    if output and not as_json:
        click.echo(f"wrote {output}")
    return 0


@cli.command("check-certificate")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check_certificate_cmd(path, as_json):
    """Re-check a certificate with independent code: exit 0 valid, 1 not valid."""
    problems = check_certificate(path)
    if as_json:
        click.echo(json.dumps({"path": path, "valid": not problems, "problems": problems}, indent=2))
        return 1 if problems else 0
    if problems:
        click.echo(f"INVALID: {path}")
        for line in problems:
            click.echo(f"  {line}")
        return 1
    click.echo(f"VALID: {path}: the members are inputs of the task with these labels, dependent, and no linear "
               f"readout labels them all right")
    return 0


@cli.command("refute")
@click.argument("task_name")
@SIZE
@task_option_flags(ALL_TASK_OPTIONS)
@arithmetic_options
@click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None, help="The model file.")
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True)
@click.option("--search-seed", "seed", type=int, default=0, show_default=True,
              help="Seed of the examples searched around (--seed is a construction's).")
@click.option("--certificates", "budget", type=click.IntRange(min=0), default=50, show_default=True,
              help="Certificates to try before the next method.")
@click.option("--timeout", type=SECONDS, default=None, help="Seconds for the whole run (building included).")
@click.option("--max-counterexamples", type=int, default=1, show_default=True)
@click.option("--engine", type=click.Choice(ENGINE_NAMES), default="auto", show_default=True,
              help="The search's engine (--method search, or auto after the other methods).")
@click.option("--start", type=int, default=0, help="The search's range: first input (enumeration order).")
@click.option("--stop", type=int, default=None, help="The search's range: end (exclusive; default: all).")
@click.option("--random-models", "random_models", type=int, default=None,
              help="Instead of --model: refute this many random models of --shape, and report per method.")
@click.option("--shape", default="1,2,relu", show_default=True, help="HEADS,WIDTH,ATTENTION of --random-models.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--dump", type=click.Path(file_okay=False), default=None, help="Write each counterexample to DIR.")
def refute_cmd(task_name, N, fmt, p, f, rounding, overflow, accumulate, model_path, method, seed, budget, timeout,
               max_counterexamples, engine, start, stop, random_models, shape, as_json, dump, **options):
    """Find inputs a model must get wrong, and the argument that forced them (exit 1 when found)."""
    arith = dict(arith=fmt, p=p, f=f, rounding=rounding, overflow=overflow, accumulate=accumulate)
    make_format(fmt, N=N, **{k: v for k, v in arith.items() if k != "arith"})  # a bad format fails before any work
    task_opts = {k: v for k, v in options.items() if v is not None}
    if random_models is not None:
        if model_path:
            raise InputError("give --model or --random-models, not both")
        refuse_given(("engine", "start", "stop"), "for one model's search (--model), not --random-models")
        try:
            heads, width, attention = shape.split(",")
            heads, width = int(heads), int(width)
        except ValueError:
            raise InputError(f"--shape must be HEADS,WIDTH,ATTENTION (e.g. 2,4,relu), got {shape!r}") from None
        rows = refute_random(_task(task_name, N, options), dict(N=N, **arith, **task_opts), random_models, heads,
                             width, attention, method, seed, timeout)
        click.echo(json.dumps(rows, indent=2) if as_json else "\n".join(
            f"{m:<10} {r['models']:>4} of {random_models} models, median {r['median_seconds']:.3f} s"
            for m, r in rows.items()))
        return 0
    if not model_path:
        raise InputError("--model FILE is required (or --random-models K)")
    deadline = Deadline(timeout)
    if dump:
        prepare_dump_dir(dump)
    with deadline.enforced(), time_limit(deadline):
        problem = verifier.build_problem(task_name, N=N, model=verifier.load_model(model_path), **arith, **task_opts)
    result = refute(problem, method, seed=seed, max_counterexamples=max_counterexamples,
                    certificates_budget=budget, deadline=deadline, engine=engine, start=start, stop=stop)
    dumps = write_dumps(result, dump, {"argument": result.argument, "certificate": result.certificate}) \
        if dump and result.counterexamples else []
    if as_json:
        click.echo(json.dumps(result.to_json() | {"dumps": [str(d) for d in dumps]}, indent=2))
    else:
        click.echo(result.summary())
        for d in dumps:
            click.echo(f"  dumped      {d}")
    return result.exit_code


@cli.command("count")
@click.argument("task_name")
@SIZE
@task_option_flags(ALL_TASK_OPTIONS)
@arithmetic_options
@click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None,
              help="The model file (default: the built-in construction).")
@construction_options(("variant", "eta", "seed"))
@click.option("--method", type=click.Choice(COUNT_METHODS), default="auto", show_default=True,
              help=f"exact: evaluate every input; sample: uniform draws; auto: exact up to {EXACT_LIMIT:,} members.")
@click.option("--samples", type=int, default=None, help=f"Uniform draws of a sampled count [default: {SAMPLES:,}].")
@click.option("--confidence", type=NUMBER, default=0.95, show_default=True,
              help="Confidence of a sampled count's Clopper-Pearson interval.")
@click.option("--sample-seed", "sample_seed", type=int, default=0, show_default=True,
              help="Seed of the draws and of the failures replayed.")
@click.option("--replay", "replays", type=int, default=REPLAY, show_default=True,
              help="Failures replayed on the evaluator's generic path.")
@click.option("--timeout", type=SECONDS, default=None, help="Seconds for the whole count (an exact count stops "
                                                            "early with a prefix).")
@click.option("--workers", type=int, default=None, help="Processes (default: both cores for large spaces).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def count_cmd(task_name, N, p, f, rounding, overflow, accumulate, model_path, variant, eta, seed, method, samples,
              confidence, sample_seed, replays, timeout, workers, as_json, **options):
    """How often is the model wrong: its FX errors over the task, counted exactly (every input) or
    estimated from uniform draws with a Clopper-Pearson interval, a sample of the failures replayed
    (docs/count.md).  Exit 1 when an error was found, 0 when an exact count found none, 3 otherwise."""
    deadline = Deadline(timeout)
    model = verifier.load_model(model_path) if model_path else None
    construction = dict(variant=variant, eta=eta, seed=seed) if model is None else {}
    if model is not None:
        refuse_given(("variant", "eta", "seed"), "a built-in construction's parameters; they do not apply to --model")
    with deadline.enforced(), time_limit(deadline):
        problem = verifier.build_problem(task_name, N=N, p=p, f=f, rounding=rounding, overflow=overflow,
                                         accumulate=accumulate, model=model, **construction,
                                         **{key: v for key, v in options.items() if v is not None})
        result = count_errors(problem, method, samples=samples, seed=sample_seed, confidence=confidence,
                              replays=replays, workers=workers, deadline=deadline)
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else result.summary())
    return result.exit_code


@cli.command("impossible")
@click.argument("task_name")
@SIZE
@task_option_flags(ALL_TASK_OPTIONS)
@click.option("--shape", "shape_text", default=None,
              help="A whole shape of models: rnn:M,P or tf1:H,M,P[,softmax|relu] (counted, for every model of it).")
@click.option("--synthesis-timeout", type=SECONDS, default=None,
              help="With --shape: also run bounded synthesis (tiny sizes: the whole dataset, or the fooling set's "
                   "inputs) for this long.")
@FORMAT_OPTION
@click.option("--p", "p", type=int, default=None, help="Bits per number (the certificate's synthesis).")
@click.option("--f", "f", type=int, default=None,
              help="Fractional bits (default: p // 2; with --shape: every f, the largest count).")
@click.option("--rounding", type=click.Choice(ROUNDINGS), default=None, help="Default floor (with --shape: every one).")
@click.option("--overflow", type=click.Choice(OVERFLOWS), default="saturate", show_default=True)
@click.option("--accumulate", type=click.Choice(ACCUMULATES), default="product", show_default=True)
@click.option("--heads", type=int, default=1, show_default=True, help="Heads of the 1-layer models searched.")
@click.option("--width", type=int, default=1, show_default=True, help="Their query, key and value width.")
@click.option("--certificate", "cert_path", type=click.Path(dir_okay=False), default=None,
              help="The certificate (default: the first one the search finds).")
@click.option("--search-seed", "seed", type=int, default=0, show_default=True,
              help="Seed of the examples searched around (--seed is a construction's).")
@click.option("--timeout", type=SECONDS, default=None,
              help="Seconds for the whole command (the certificate, the formula and z3; with --shape, the count).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def impossible_cmd(task_name, N, shape_text, synthesis_timeout, fmt, p, f, rounding, overflow, accumulate, heads,
                   width, cert_path, seed, timeout, as_json, **options):
    """Is no model of a shape able to compute the task?

    --shape: counted for every model of the shape (exit 0 IMPOSSIBLE, 3 when the count does not
    exclude it).  Otherwise: does any 1-layer ReLU model of --heads and --width, weights p-bit codes,
    get a certificate right (exit 0 when none does, 1 when one escapes, 3 unknown)."""
    deadline = Deadline(timeout)
    task_opts = {k: v for k, v in options.items() if v is not None}
    if shape_text is not None:
        refuse_given(("fmt", "p", "heads", "width", "cert_path", "overflow"),
                     "for a certificate's synthesis; --shape gives the bits and widths (binary fixed point)")
        with deadline.enforced():
            v = shapes.impossible(task_name, N, shapes.parse_shape(shape_text), f, rounding, accumulate,
                                  synthesis_timeout=synthesis_timeout, **task_opts)
        click.echo(json.dumps(v.to_json(), indent=2) if as_json else "\n".join(v.lines()))
        return v.exit_code
    if p is None and fmt in (None, "fx"):
        raise InputError("give --shape (a whole shape, counted) or --p or --format (a certificate's bounded synthesis)")
    if synthesis_timeout is not None:
        raise InputError("--synthesis-timeout is for --shape")
    rounding = rounding or "floor"
    task = _task(task_name, N, options)
    fx = make_format(fmt, N=task.N, p=p, f=f, rounding=rounding, overflow=overflow, accumulate=accumulate)
    if heads < 1 or width < 1:
        raise InputError(f"--heads and --width must be >= 1, got {heads} and {width}")
    with deadline.enforced():
        cert = load_certificate(cert_path) if cert_path else find_certificate(task, seed)
        if cert is None:
            raise InputError(f"no certificate found for {task.name}: nothing to decide")
        s = decide_certificate(task, cert, heads, width, fx, deadline)
    click.echo(json.dumps({"certificate": cert.to_json(), "synthesis": s.to_json()}, indent=2) if as_json
               else "\n".join(cert.lines() + certificate_lines(s, fx)))
    return s.exit_code


@cli.command("separation")
@click.argument("task_name")
@click.option("--N", "N", type=int, default=None, help="Size of the task (the table's N; not with --plot).")
@task_option_flags(ALL_TASK_OPTIONS)
@click.option("--p", "p", type=int, default=None, help="Bits of the built-in construction's run (the table).")
@click.option("--f", "f", type=int, default=None, help="Its fractional bits (default p // 2).")
@click.option("--shapes", "shape_list", default=None,
              help="The other side's shapes, ';'-separated (default: a ladder of the side the task separates); "
                   "with --plot, families without the bits: rnn:M, tf1:H,M.")
@click.option("--sweep", "sweep_path", type=click.Path(dir_okay=False), default=None,
              help="With --plot: the construction's sweep (verify sweep -o FILE.json), its p* by N.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Instead of the table: draw both sides over the sweep's N (.png or .svg; needs matplotlib).")
@run_timeout_option(which=" (the construction's)")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@FORCE
def separation_cmd(task_name, N, p, f, shape_list, sweep_path, plot_path, timeout, as_json, force, **options):
    """Both sides of a separation at one N: the built-in construction proved at --p, and the shapes
    of the other architecture certified impossible (or not) by counting, with the smallest N of each
    (the exit code is the construction's verdict's).  With --plot and --sweep: the figure of both
    sides over N."""
    task_opts = {k: v for k, v in options.items() if v is not None}
    if plot_path or sweep_path:
        if not (plot_path and sweep_path) or N is not None or p is not None or as_json:
            raise InputError("--plot takes --sweep FILE (and no --N, --p or --json); the table takes --N and --p")
        plots.check_output(plot_path, force)
        fig = separation.sweep_figure(task_name, sweep_path, shape_list, **task_opts)
        click.echo(f"wrote {plots.save(fig, plot_path, force=force)}", err=True)
        return 0
    if N is None or p is None:
        raise InputError("the table takes --N and --p (or --plot with --sweep)")
    table = separation.table(task_name, N, p, f, [shapes.parse_shape(x) for x in shape_list.split(";")]
                             if shape_list else None, timeout, **task_opts)
    click.echo(json.dumps(table.to_json(), indent=2) if as_json else table.markdown())
    return EXIT_CODES[table.construction["verdict"]]  # a construction not proved at --p is no separation


@cli.command("schema")
@click.argument("name", type=click.Choice(sorted(SCHEMAS)))
def schema_cmd(name):
    """Print the JSON Schema of a file format (model metadata, instance, dataset, spec, certificate)."""
    schema = SCHEMAS[name]
    click.echo(json.dumps(schema() if callable(schema) else schema, indent=2))
    return 0


def no_such_option(exc: click.NoSuchOption) -> str:
    """The message of an option this command lacks: the commands that have it (verify idxl --plot:
    sweep and separation draw), else click's guess."""
    name = exc.option_name.split("=")[0]
    having = sorted(n for n, c in cli.commands.items()
                    if any(name in p.opts or name in p.secondary_opts for p in c.params))
    if not having:
        return exc.format_message()
    return (f"no such option: {name} (it is an option of verify {', '.join(having[:6])}"
            + (f" and {len(having) - 6} more" if len(having) > 6 else "") + "; see verify COMMAND --help)")


def main(argv: list[str] | None = None) -> int:
    interrupts.install()
    try:
        code = cli.main(args=argv, prog_name="verify", standalone_mode=False)
    except click.NoSuchOption as exc:  # click's "did you mean" guesses by spelling: say where the option is
        where = exc.ctx.command_path if exc.ctx is not None else "verify"
        click.echo(f"{where}: error: {no_such_option(exc)}", err=True)
        return 2
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "verify"
        click.echo(f"{where}: error: {exc.format_message()}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"verify: error: {exc.format_message()}", err=True)
        return 2
    except NotFinished as exc:  # the user's code outlasted the timeout: no task, no input covered
        click.echo(f"verify: unknown: {exc}", err=True)
        return 3
    except InputError as exc:  # one line, even when it quotes another tool's multi-line message
        click.echo("verify: error: " + "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()),
                   err=True)
        return 2
    except InternalError as exc:
        click.echo(f"verify: internal error (please report): {exc}", err=True)
        return 2
    except OSError as exc:  # a file or directory the user named cannot be written or read
        click.echo(f"verify: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
        return 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo(f"verify: interrupted ({interrupts.cause()}) before a verdict: unknown", err=True)
        return 3
    except TimedOut as exc:  # the deadline passed while the problem was built, before any input was covered
        click.echo(f"verify: timeout after {exc.seconds:g} s before a verdict: unknown", err=True)
        return 3
    except MemoryError:
        click.echo("verify: error: out of memory (a size the estimates let through); use a smaller size", err=True)
        return 2
    except Exception as exc:  # a bug: still one line and exit 2, never a traceback or a verdict
        click.echo(f"verify: internal error (please report): {type(exc).__name__}: {exc}", err=True)
        return 2
    return code if isinstance(code, int) else 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
