"""The command line: `run`, `list`, `explain`, `validate`, `simulate`, `demo` and `bench`.

`main` parses the arguments, reads the settings once (a command's flags override the
environment), configures logging and runs one command. Every input is validated before anything
runs or is written: a bad trace, setting or number ends in one line on stderr (`error:
FILE:LINE: field 'NAME': problem`) and exit code 2, and the output directory is left untouched
(the report itself is written all-or-nothing).

Exit codes: 0 done; 1 `explain` found nothing managed, `validate` found problems (or warnings
with `--strict`), or `run` stopped on an unexpected error; 2 bad arguments, settings, input or
credentials (for `validate`, an input that cannot be read or is not YAML or JSON).

It must not decide anything itself: the controller (`app`), the simulator, the comparison
(`experiment`) and the reports do the work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np
import numpy.typing as npt
import pydantic
import structlog
import yaml

import autoscaler
from autoscaler import errors, explain, fleet, logs, settings, validate
from autoscaler.experiment import run as sim_run
from autoscaler.experiment import simulate as simulation
from autoscaler.experiment import sweep, trace, whatif
from autoscaler.sim import params as sim_params

# Imported where used at run time: the reports pull in matplotlib and `app` the Kubernetes and
# Prometheus clients (most of a second each), which `--help` and input errors do without.

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
"""`run` stopped on an unexpected error (logged); Kubernetes restarts the container."""
EXIT_USAGE = 2
"""Bad arguments, settings or input files."""
EXIT_INTERRUPTED = 130

DEFAULT_OUT = Path("sim-out")
DEMO_OUT = DEFAULT_OUT / "demo"
BENCH_OUT = Path("bench-out") / "trace"

_SIMULATION_LOG_LEVEL = "warning"
"""Log level of simulate and demo unless AUTOSCALER_LOG__LEVEL is set (info shows every
decision of the simulated controller)."""
_LOG_EPILOG = (
    "The simulated controller logs each decision to stderr with AUTOSCALER_LOG__LEVEL=info "
    f"(default for this command: {_SIMULATION_LOG_LEVEL})."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        return _fail(str(e))
    except SystemExit as e:  # --help and --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    try:
        config = settings.Settings(**args.overrides(args))
    except pydantic.ValidationError as e:
        return _fail(_settings_problem(e))
    # The simulated controller's decisions are the loop's ordinary info lines: dozens a minute
    # of simulated time. Simulation commands show them only when a level is asked for.
    explicit = "level" in config.log.model_fields_set
    level = config.log.level if explicit else args.log_level
    logs.configure(json=config.log.json_lines, level=level)
    command: Callable[[argparse.Namespace, settings.Settings], int] = args.command
    try:
        return command(args, config)
    except errors.ConfigError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


# --- run ---------------------------------------------------------------------------------------


def _run_controller(args: argparse.Namespace, config: settings.Settings) -> int:
    from autoscaler import app

    try:
        asyncio.run(app.run(config))
    except errors.ConfigError:
        raise
    except Exception:
        # The one place an unexpected error is caught: to log it as JSON before exiting.
        log.exception(RUN_FAILED)
        return EXIT_FAILED
    return EXIT_OK


RUN_FAILED = "controller.failed"


def _run_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the `run` flags give, in the shape of `Settings` (flags beat variables)."""
    kubernetes = _kubernetes_overrides(args)
    if args.namespaces:
        kubernetes["namespaces"] = tuple(args.namespaces)
    if args.exclude_namespaces:
        kubernetes["exclude_namespaces"] = tuple(args.exclude_namespaces)
    if args.dry_run:
        kubernetes["dry_run"] = True
    overrides: dict[str, Any] = {"kubernetes": kubernetes} if kubernetes else {}
    chosen = {
        "url": args.prometheus_url,
        "bearer_token_file": args.prometheus_bearer_token_file,
        "ca_file": args.prometheus_ca_file,
    }
    prometheus = {k: v for k, v in chosen.items() if v is not None}
    if prometheus:
        overrides["prometheus"] = prometheus
    if args.metrics_port is not None:
        overrides["http"] = {"port": args.metrics_port}
    return overrides


def _kubernetes_overrides(args: argparse.Namespace) -> dict[str, Any]:
    chosen = {"kubeconfig": args.kubeconfig, "context": args.context}
    return {k: v for k, v in chosen.items() if v is not None}


def _no_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {}


# --- explain and validate ----------------------------------------------------------------------


def _explain(args: argparse.Namespace, config: settings.Settings) -> int:
    json_output = args.output == "json"
    if args.filename is not None:
        return _explain_file(args.filename, args.target, json_output=json_output)
    if args.target is None:
        return _fail("explain needs NAMESPACE/NAME, or -f FILE")
    from autoscaler import app

    namespace, name = args.target
    try:
        deployment = asyncio.run(app.read_workload(config.kubernetes, namespace, name))
    except errors.ActuationError as e:
        return _fail(str(e))
    return explain.main(
        namespace, name, deployment, sys.stdout, sys.stderr, json_output=json_output
    )


def _explain_file(path: str, target: tuple[str, str] | None, *, json_output: bool) -> int:
    """`explain -f FILE`: the Deployment in a manifest (the one named by `target` if several)."""
    source = "standard input" if path == validate.STDIN else path
    try:
        text = sys.stdin.read() if path == validate.STDIN else Path(path).read_text()
        found = list(explain.deployments_in(text))
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"{source}: cannot be read: {e}")
    except yaml.YAMLError as e:
        return _fail(f"{source}: not YAML or JSON: {str(e).splitlines()[0]}")

    def ref(deployment: Any) -> tuple[str, str]:
        metadata = deployment.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        return str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")

    if target is not None:
        found = [d for d in found if ref(d) == target]
    if len(found) != 1:
        which = "" if target is None else f" named {target[0]}/{target[1]}"
        return _fail(
            f"{source}: expected one Deployment{which}, found {len(found)} "
            "(name one with NAMESPACE/NAME)"
        )
    namespace, name = ref(found[0])
    return explain.main(namespace, name, found[0], sys.stdout, sys.stderr, json_output=json_output)


def _list(args: argparse.Namespace, config: settings.Settings) -> int:
    from autoscaler import app

    namespace = None if args.all_namespaces else args.namespace
    try:
        deployments = asyncio.run(app.list_workloads(config.kubernetes, namespace))
    except errors.ActuationError as e:
        return _fail(str(e))
    found = fleet.rows(deployments)
    now_s = time.time()
    if args.output == "json":
        fleet.write_json(found, sys.stdout, now_s=now_s)
    elif found:
        fleet.write_table(
            found,
            sys.stdout,
            now_s=now_s,
            namespaces=args.all_namespaces,
            wide=args.output == "wide",
        )
    else:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"No managed Deployments found in {where}.", file=sys.stderr)
    return EXIT_OK


def _explain_overrides(args: argparse.Namespace) -> dict[str, Any]:
    kubernetes = _kubernetes_overrides(args)
    return {"kubernetes": kubernetes} if kubernetes else {}


def _validate(args: argparse.Namespace, config: settings.Settings) -> int:
    return validate.main(args.files, sys.stdout, sys.stderr, strict=args.strict)


# --- simulate ----------------------------------------------------------------------------------


def _simulate(args: argparse.Namespace, config: settings.Settings) -> int:
    out_dir: Path = args.out
    _check_writable(out_dir)
    simulation.warn_unused_settings(config)
    arrivals = trace.load(args.trace)
    options = simulation.Options(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(simulation.Options)}
    )
    params = simulation.params_for(options, config, arrivals, trace_name=str(args.trace))
    name = Path(args.trace).name
    log.debug(logs.TRACE_LOADED, path=str(args.trace), seconds=len(arrivals))

    with _progress(enabled=not args.quiet) as track:
        result = simulation.run(arrivals, params, track=track, label=f"{name} ({params.policy})")
    paths = simulation.write(result, out_dir, trace_name=name)
    if not args.quiet:
        print(simulation.summary_table([result]))
        print()
        print(f"wrote {paths.timeseries}")
        print(f"      {paths.summary}")
        print(f"      {paths.plot}")
    return EXIT_OK


# --- demo --------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace, config: settings.Settings) -> int:
    return run_demo(out_dir=args.out, config=config)


def run_demo(
    *,
    out_dir: Path,
    config: settings.Settings,
    arrivals: npt.NDArray[np.float64] | None = None,
) -> int:
    """The `demo` command: both policies on the bundled Azure trace, side by side.

    `arrivals` replaces the bundled trace's counts (tests pass a prefix of it to stay fast).
    """
    for directory in (out_dir, *(out_dir / policy for policy in simulation.DEMO_POLICIES)):
        _check_writable(directory)
    simulation.warn_unused_settings(config)
    with _progress(enabled=True) as track:
        found = simulation.demo(config, track=track, arrivals=arrivals)
    written = [
        simulation.write(r, out_dir / r.params.policy, trace_name=found.name) for r in found.results
    ]
    print(simulation.explanation(found))
    print()
    print(simulation.summary_table(found.results))
    print()
    for paths in written:
        print(f"plot: {paths.plot}")
    print(f"(beside each plot: {written[0].timeseries.name} and {written[0].summary.name})")
    return EXIT_OK


# --- bench -------------------------------------------------------------------------------------


def _bench(args: argparse.Namespace, config: settings.Settings) -> int:
    from autoscaler.experiment import report

    out_dir: Path = args.out
    _check_writable(out_dir)
    simulation.warn_unused_settings(config)
    arrivals = trace.load(args.trace)
    name = Path(args.trace).name
    if args.target_mean_replicas is None:
        rate_scale = 1.0 if args.rate_scale is None else args.rate_scale
    else:
        mean = args.target_mean_replicas
        if mean > sweep.BASE.max_replicas:
            raise errors.ConfigError(
                f"--target-mean-replicas {mean:g} is above the {sweep.BASE.max_replicas} "
                "replicas every policy may use"
            )
        try:
            rate_scale = whatif.rate_scale_for_mean_replicas(arrivals, mean)
        except ValueError as e:
            raise errors.TraceError(str(args.trace), None, None, str(e)) from e
    log.debug(logs.TRACE_LOADED, path=str(args.trace), seconds=len(arrivals))

    show = not args.quiet and sys.stderr.isatty()
    results = whatif.compare(
        arrivals,
        name=name,
        rate_scale=rate_scale,
        regime=args.regime,
        policies=args.policies,
        jobs=args.jobs or sweep.available_cpus(),
        progress=_show_bench_progress if show else None,
    )
    paths = whatif.write(results, out_dir, rate_scale=rate_scale)
    print(report.table(results))
    if not args.quiet:
        print()
        print(f"wrote {paths.results}")
        print(f"      {paths.plot}")
    return EXIT_OK


def _show_bench_progress(outcome: sweep.Outcome, finished: int, total: int) -> None:
    from autoscaler.experiment import report

    print(report.progress_line(outcome, finished, total), file=sys.stderr, flush=True)


# --- shared steps ------------------------------------------------------------------------------


def _check_writable(out_dir: Path) -> None:
    """Refuse an output directory that could not be written, before anything runs."""
    if out_dir.exists() and not out_dir.is_dir():
        raise errors.ConfigError(f"{out_dir}: exists and is not a directory")
    existing = out_dir.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise errors.ConfigError(f"{out_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise errors.ConfigError(f"{out_dir}: {existing} is not writable")


# --- progress ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _progress(*, enabled: bool) -> Iterator[simulation.Tracker]:
    """Yields `track(label, total_s)`: a context around one simulation run, giving its callback.

    On a terminal: a rich progress bar on stderr. Otherwise (a pipe, a file, a CI log, where
    stderr carries JSON log lines that progress text would corrupt) or disabled: no callback.
    """
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield _no_progress
        return
    from rich import progress as rich_progress

    bar = rich_progress.Progress(
        rich_progress.TextColumn("{task.description}"),
        rich_progress.BarColumn(),
        rich_progress.TaskProgressColumn(),
        rich_progress.TextColumn("simulated {task.fields[clock]}"),
        rich_progress.TimeElapsedColumn(),
        console=console,
    )

    @contextlib.contextmanager
    def track(label: str, total_s: float) -> Iterator[simulation.ProgressFn]:
        task = bar.add_task(label, total=total_s, clock=_clock(0, total_s))

        def update(now_s: float, total_s: float) -> None:
            bar.update(task, completed=now_s, total=total_s, clock=_clock(now_s, total_s))

        yield update
        update(total_s, total_s)

    with bar:
        yield track


@contextlib.contextmanager
def _no_progress(label: str, total_s: float) -> Iterator[None]:
    yield None


def _clock(now_s: float, total_s: float) -> str:
    def hms(seconds: float) -> str:
        m, s = divmod(int(seconds), 60)
        h, m = divmod(m, 60)
        return f"{h}:{m:02d}:{s:02d}"

    return f"{hms(now_s)} / {hms(total_s)}"


# --- arguments ---------------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and returns exit code 2 instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autoscaler",
        description="Elastic autoscaler for GPU model-serving Deployments.",
    )
    parser.add_argument("--version", action="version", version=autoscaler.__version__)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    parser.set_defaults(overrides=_no_overrides)

    run = commands.add_parser(
        "run",
        help="run the controller against a cluster and Prometheus",
        description="Run the controller: watch the annotated Deployments, read their load from "
        "Prometheus, and scale them (one leader among the replicas). Settings come from "
        "AUTOSCALER_ variables; these flags override them. Stops cleanly on SIGTERM or SIGINT.",
    )
    run.set_defaults(command=_run_controller, log_level="info", overrides=_run_overrides)
    _add_kubernetes_flags(run)
    run.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        metavar="NS",
        help="manage Deployments in NS only (repeat for several; default: all namespaces)",
    )
    run.add_argument(
        "--exclude-namespace",
        dest="exclude_namespaces",
        action="append",
        metavar="NS",
        help="never manage Deployments in NS (repeat for several)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and log for the whole cluster, but write nothing (not even the Lease)",
    )
    run.add_argument("--prometheus-url", metavar="URL", help="base URL of the Prometheus HTTP API")
    # Files only: a secret on the command line would show in `ps` and in the pod spec.
    run.add_argument(
        "--prometheus-bearer-token-file",
        metavar="FILE",
        help="file holding the bearer token sent to Prometheus (read again when it changes)",
    )
    run.add_argument(
        "--prometheus-ca-file",
        metavar="FILE",
        help="PEM bundle of the CAs that sign Prometheus' certificate",
    )
    run.add_argument(
        "--metrics-port",
        type=_integer(minimum=0),
        metavar="N",
        help="port of /metrics, /healthz and /readyz (default: 8080)",
    )

    explain_ = commands.add_parser(
        "explain",
        help="print the last decision on a Deployment and why",
        description="Read a Deployment once and print the autoscaler's last decision on it "
        "(replicas, reason, each signal's ratio and estimate, cooldowns), or why it is not "
        "managed. Exit code 1 when it is missing or not managed.",
    )
    explain_.set_defaults(command=_explain, log_level="warning", overrides=_explain_overrides)
    explain_.add_argument(
        "target",
        type=_deployment_ref,
        nargs="?",
        metavar="NAMESPACE/NAME",
        help="the Deployment (optional with -f when the file holds one Deployment)",
    )
    explain_.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="explain the Deployment in a manifest file (`kubectl get deploy NAME -o yaml` "
        "output too) instead of reading the cluster; - for standard input",
    )
    explain_.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text for people (default), or one JSON object",
    )
    _add_kubernetes_flags(explain_)

    list_ = commands.add_parser(
        "list",
        help="list the managed Deployments and their last decision",
        description="Read the Deployments once and print one line per managed Deployment: "
        "desired, current and serving replicas, the last decision's kind/reason, the age of "
        "the last scale, the traffic ramp and the placement tiers. An annotation the "
        "controller cannot read shows as ?, with the reason in -o wide and -o json.",
    )
    list_.set_defaults(command=_list, log_level="warning", overrides=_explain_overrides)
    where = list_.add_mutually_exclusive_group()
    where.add_argument(
        "-n",
        "--namespace",
        default="default",
        metavar="NS",
        help="list the Deployments of NS (default: %(default)s)",
    )
    where.add_argument("-A", "--all-namespaces", action="store_true", help="list every namespace")
    list_.add_argument(
        "-o",
        "--output",
        choices=("wide", "json"),
        help="wide: add targets, bounds, policy, mode and problems; json: a list of objects",
    )
    _add_kubernetes_flags(list_)

    validate_ = commands.add_parser(
        "validate",
        help="lint the autoscaler annotations in manifests, offline",
        description="Check every workload that opts in to the autoscaler in the given "
        "manifests (Deployment, StatefulSet, LeaderWorkerSet, Argo Rollout), without a cluster: "
        "its annotations, the readiness gate and warming label a traffic router needs, its "
        "selector, spec.replicas (a warning) and any HorizontalPodAutoscaler or ScaledObject "
        "that scales it too. One finding per line: file, document, object, field or key, value "
        "and rule. A clean run ends with one line counting the autoscaled workloads by kind.",
        epilog="exit codes: 0 no problem (warnings are printed and still give 0, unless "
        "--strict); 1 problems found (or warnings, with --strict); 2 an input cannot be read or "
        "is not YAML/JSON (reported on stderr; the rest is still checked), or a usage error",
    )
    validate_.set_defaults(command=_validate, log_level="warning")
    validate_.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="PATH",
        help="a manifest file (multi-document YAML, or JSON when named *.json), a directory "
        "(every *.yaml, *.yml and *.json below it, in sorted order) or - for standard input; "
        "repeat for several",
    )
    validate_.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings as problems (exit code 1)",
    )

    simulate = commands.add_parser(
        "simulate",
        help="replay a request trace against a virtual GPU cluster",
        description="Replay a request trace (t_seconds,requests CSV, gzip allowed) through the "
        "real decision loop against a virtual GPU cluster; write timeseries.csv, summary.json "
        "and plot.png.",
        epilog=_LOG_EPILOG,
    )
    simulate.set_defaults(command=_simulate, log_level=_SIMULATION_LOG_LEVEL)
    simulate.add_argument("--trace", required=True, metavar="FILE", help="the request trace")
    simulate.add_argument(
        "--policy",
        choices=_policy_names(),
        default="default",
        help="scaling policy (default: %(default)s)",
    )
    _add_trace_scale(simulate, target="the load target")
    simulate.add_argument(
        "--min-replicas",
        type=_integer(minimum=0),
        metavar="N",
        help=f"lower bound on replicas (default: {simulation.DEFAULTS.min_replicas})",
    )
    simulate.add_argument(
        "--max-replicas",
        type=_integer(minimum=1),
        metavar="N",
        help=f"upper bound on replicas (default: {simulation.DEFAULTS.max_replicas})",
    )
    simulate.add_argument(
        "--startup-s",
        type=_number(minimum=0, inclusive=True),
        metavar="S",
        help=f"median pod start-up time in seconds (default: {simulation.DEFAULTS.startup_s:g})",
    )
    simulate.add_argument(
        "--seed",
        type=_integer(minimum=0),
        metavar="N",
        help=f"random seed (default: {simulation.DEFAULTS.seed})",
    )
    simulate.add_argument(
        "--ramp",
        choices=sim_params.RAMP_ROUTERS,
        metavar="ROUTER",
        help="new pods pass the warm-up gate, then the traffic ramp through ROUTER (istio, "
        "gateway-api, smi; none: the gate alone); without this option a pod serves its full "
        "share once warm",
    )
    simulate.add_argument(
        "--placement",
        choices=sim_params.PLACEMENTS,
        help="place pods on whole cards only, or by the placement ladder (whole cards, then "
        "MIG slices, then time-sliced shares), on --cluster",
    )
    simulate.add_argument(
        "--cluster",
        choices=sorted(sim_params.CLUSTERS),
        help=f"a cluster described by GPU tier (default with --placement: "
        f"{simulation.DEFAULT_CLUSTER}); without either option, unlimited whole cards",
    )
    simulate.add_argument(
        "--model-memory-gib",
        type=_number(minimum=0, inclusive=False),
        default=simulation.DEFAULT_MODEL_MEMORY_GIB,
        metavar="G",
        help="GPU memory the model needs, for --placement (default: %(default)s)",
    )
    simulate.add_argument(
        "--gpus",
        type=_integer(minimum=1),
        metavar="N",
        help="GPUs free for the service, one per replica, on nodes of --gpus-per-node (default: "
        "never short of GPUs)",
    )
    simulate.add_argument(
        "--gpus-per-node",
        type=_integer(minimum=1),
        metavar="N",
        help=f"GPUs per node of --gpus (default: {simulation.DEFAULTS.gpus_per_node})",
    )
    _add_cold_start_flags(simulate)
    simulate.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="output directory (default: %(default)s)",
    )
    simulate.add_argument(
        "--quiet", action="store_true", help="no progress and no table; errors only"
    )

    demo = commands.add_parser(
        "demo",
        help="compare both policies on an hour of real LLM chat traffic",
        description="Run both policies on the bundled Azure LLM conversation trace (one hour, "
        f"scaled to a mean of {simulation.DEMO_MEAN_REPLICAS:g} replicas), print their summaries "
        "side by side and write the plots.",
        epilog=_LOG_EPILOG,
    )
    demo.set_defaults(command=_demo, log_level=_SIMULATION_LOG_LEVEL)
    demo.add_argument(
        "--out",
        type=Path,
        default=DEMO_OUT,
        metavar="DIR",
        help="one subdirectory per policy in DIR (default: %(default)s)",
    )
    _add_bench(commands)
    return parser


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="compare every policy on your own request trace, at equal SLO",
        description="Replay a request trace (the simulate --trace CSV) through every policy on "
        "the same virtual cluster, search each one's utilisation target for the cheapest "
        "setting with at most 1 % of requests over the SLO or dropped, print the table and "
        "write results.json and plot.png.",
        epilog=_LOG_EPILOG,
    )
    bench.set_defaults(command=_bench, log_level=_SIMULATION_LOG_LEVEL)
    bench.add_argument("--trace", required=True, metavar="FILE", help="the request trace")
    bench.add_argument(
        "--regime",
        choices=tuple(sweep.REGIMES),
        default=whatif.DEFAULT_REGIME,
        help="pod start-up: "
        + ", ".join(f"{r.name} ~{r.startup_s:g} s ({r.about})" for r in sweep.REGIMES.values())
        + " (default: %(default)s)",
    )
    bench.add_argument(
        "--policies",
        type=_names(sweep.POLICIES, "policy"),
        default=sweep.POLICIES,
        metavar="P,Q",
        help=f"comma-separated (default: {','.join(sweep.POLICIES)})",
    )
    _add_trace_scale(bench, target="the default load target")
    bench.add_argument(
        "--jobs",
        type=_integer(minimum=1),
        metavar="N",
        help="worker processes (default: the CPUs available); the results do not depend on it",
    )
    bench.add_argument(
        "--out",
        type=Path,
        default=BENCH_OUT,
        metavar="DIR",
        help="output directory (default: %(default)s)",
    )
    bench.add_argument("--quiet", action="store_true", help="print the table only")


def _add_cold_start_flags(parser: argparse.ArgumentParser) -> None:
    """The node caches and the standby pool of `simulate` (docs/simulator.md)."""
    cached = simulation.CACHE_DEFAULTS
    cache = parser.add_argument_group(
        "node caches",
        "Nodes keep a cache of model weights: a pod on a node whose cache holds the model "
        "starts in --warm-startup-s, any other in --startup-s. Any of these options turns the "
        "cache model on (the others keep their defaults); it needs --gpus.",
    )
    cache.add_argument(
        "--node-cache-gib",
        type=_number(minimum=0, inclusive=True),
        metavar="G",
        help=f"weights one node's cache holds, least recently used out first "
        f"(default: {cached.node_cache_gib:g})",
    )
    cache.add_argument(
        "--model-size-gib",
        type=_number(minimum=0, inclusive=False),
        metavar="G",
        help=f"the weights of each model, the service's and the other tenants' "
        f"(default: {cached.model_size_gib:g})",
    )
    cache.add_argument(
        "--warm-startup-s",
        type=_number(minimum=0, inclusive=True),
        metavar="S",
        help=f"median start-up of a pod whose node has the model cached "
        f"(default: {cached.warm_startup_s:g})",
    )
    cache.add_argument(
        "--cache-retention-s",
        type=_number(minimum=0, inclusive=False),
        metavar="S",
        help="a model unused on a node this long leaves its cache (default: only eviction)",
    )
    cache.add_argument(
        "--cache-placement",
        choices=sim_params.CACHE_PLACEMENTS,
        help="which free GPU a new pod gets: spread, a random node (a scheduler blind to the "
        "caches); cache-aware, a node holding the model first, as the controller's node "
        f"affinity asks (default: {cached.placement})",
    )
    cache.add_argument(
        "--other-models",
        type=_integer(minimum=0),
        metavar="N",
        help=f"other tenants' models competing for the caches (default: {cached.other_models})",
    )
    cache.add_argument(
        "--other-loads-per-node-hour",
        type=_number(minimum=0, inclusive=True),
        metavar="X",
        help=f"how often one of the other models starts on a node, per hour "
        f"(default: {cached.other_loads_per_node_hour:g})",
    )
    pooled = simulation.STANDBY_DEFAULTS
    pool = parser.add_argument_group(
        "standby pool",
        "Warm pods beside the replicas, serving nothing until a scale-up promotes them. Any of "
        "these options turns the pool on (--standby auto unless given); not with --ramp, "
        "--placement or --cluster.",
    )
    pool.add_argument(
        "--standby",
        type=_standby_size,
        metavar="N|auto",
        help="a fixed pool of N pods, or auto: the --standby-quantile of how far the load outran "
        "the replicas within one start-up, in replicas, up to --standby-cap",
    )
    pool.add_argument(
        "--standby-cap",
        type=_integer(minimum=0),
        metavar="N",
        help=f"most pods of the automatic pool (default: {pooled.cap})",
    )
    pool.add_argument(
        "--standby-quantile",
        type=_number(minimum=0, inclusive=False, maximum=1),
        metavar="Q",
        help=f"the quantile of the shortfall the automatic pool covers "
        f"(default: {pooled.quantile:g})",
    )
    pool.add_argument(
        "--standby-min-history-s",
        type=_number(minimum=0, inclusive=True),
        metavar="S",
        help=f"the automatic pool is empty until this much shortfall history "
        f"(default: {pooled.min_history_s:g})",
    )
    pool.add_argument(
        "--standby-horizon-s",
        type=_number(minimum=0, inclusive=False),
        metavar="S",
        help=f"how far back the shortfall history reaches (default: {pooled.horizon_s:g})",
    )
    pool.add_argument(
        "--standby-promote-s",
        type=_number(minimum=0, inclusive=True),
        metavar="S",
        help=f"from a standby pod's promotion to its serving (default: {pooled.promote_s:g})",
    )


def _standby_size(text: str) -> int | Literal["auto"]:
    if text.strip().lower() == simulation.AUTO:
        return simulation.AUTO
    try:
        return _integer(minimum=0)(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"expected a number of pods or auto: {e}") from None


def _add_trace_scale(parser: argparse.ArgumentParser, *, target: str) -> None:
    """`--rate-scale` or `--target-mean-replicas`: how a trace's counts are scaled."""
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument(
        "--rate-scale",
        type=_number(minimum=0, inclusive=False),
        metavar="X",
        help="multiply every request count by X (default: 1)",
    )
    scale.add_argument(
        "--target-mean-replicas",
        type=_number(minimum=0, inclusive=False),
        metavar="N",
        help=f"scale the trace so its mean load needs N replicas at {target}",
    )


def _add_kubernetes_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: in-cluster credentials, else KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")


def _deployment_ref(text: str) -> tuple[str, str]:
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _policy_names() -> list[str]:
    return list(sim_run.POLICIES)


def _names(known: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of `known` names, each once, in the order given."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(unknown) or text!r}; known: {', '.join(known)}"
            )
        return tuple(dict.fromkeys(names))

    return parse


def _integer(*, minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _number(
    *, minimum: float, inclusive: bool, maximum: float | None = None
) -> Callable[[str], float]:
    """A finite number above `minimum` (or at it, when `inclusive`), at most `maximum`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if value < minimum or (value == minimum and not inclusive):
            bound = "at least" if inclusive else "above"
            raise argparse.ArgumentTypeError(f"must be {bound} {minimum:g}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, got {text}")
        return value

    return parse


# --- errors ------------------------------------------------------------------------------------


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _settings_problem(e: pydantic.ValidationError) -> str:
    """The first problem of a settings error, as one line naming the environment variable."""
    first = e.errors()[0]
    loc = [str(part) for part in first["loc"]]
    where = "AUTOSCALER_" + "__".join(part.upper() for part in loc) if loc else "settings"
    message = first["msg"].removeprefix("Value error, ")
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{where}: {message}{more}"
