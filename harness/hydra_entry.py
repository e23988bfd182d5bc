"""Run a Hydra task with the harness's exit statuses and one-line errors.

Exit 0 ok, 1 a crash, 2 bad input, 130 interrupted (SIGINT or SIGTERM at any moment), each with one
stderr line and no traceback. Bad input is told from a crash by the exception's type, wherever it was
raised (composing the config, inside the task, in a joblib worker of a parallel sweep): Hydra's
composition and override-syntax errors, OmegaConf's key and type errors, `InputError`, and an output
folder that cannot be written are bad input; anything else is a crash, whose traceback goes to
`<run dir>/traceback.txt` (HYDRA_FULL_ERROR=1 prints it as Hydra would). Hydra's own multi-line
messages are folded into one line that keeps the key and the valid choices Hydra names.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    _input_cause,
    crash_site,
    describe_crash,
    forget_interrupt,
    install_signal_handlers,
    interrupted,
    one_line,
    path_error,
    save_traceback,
    yaml_error,
)
from harness.resources import conf_dir, config_groups

CONF_DIR = str(conf_dir())  # inside the installed package, else the source tree's conf/

_JOB_LINE = "Error executing job with overrides: "
_DROP = ("Set the environment variable HYDRA_FULL_ERROR", "full_key:", "reference_type=", "object_type=",
         "See https://hydra.cc/")


def _is_config_error(err: BaseException) -> bool:
    """Hydra and OmegaConf errors that describe the configuration, not a bug in a task."""
    from hydra.errors import HydraException, InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(err, InstantiationException):  # a `_target_` that cannot be found or called with these keys
        root: BaseException = err
        while root.__cause__ is not None:
            root = root.__cause__
        return root is err or isinstance(root, (TypeError, ImportError, AttributeError, HydraException,
                                                OmegaConfBaseException))
    return isinstance(err, (HydraException, OmegaConfBaseException))


def _failing_override(overrides: list[str]) -> str | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except Exception:  # any parse failure names this override
            return override
    return None


def fold_hydra_error(err: BaseException, overrides: list[str] | None = None) -> str:
    """Hydra's message (6-18 lines: problem, options, search path, cause) as one line."""
    from hydra.errors import OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    texts = [str(err)]
    cause = err.__cause__
    if isinstance(cause, OmegaConfBaseException) and str(cause) not in str(err):
        texts.append(str(cause))
    parts: list[str] = []
    options: list[str] = []
    group = None
    for text in texts:
        section = "text"
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(_DROP):
                continue
            if line.startswith("Config search path"):
                section = "search"
                continue
            if line.startswith("Available options in"):
                section, group = "options", line.removeprefix("Available options in").strip(" :'")
                continue
            if section == "search" and line.startswith("provider="):
                continue
            if section == "options" and raw.startswith(("\t", " ")):
                if not line.startswith("base_"):  # base_<group>: the group's schema, not an option
                    options.append(line)
                continue
            section = "text"
            parts.append(line.rstrip("."))
    message = "; ".join(dict.fromkeys(parts)) or type(err).__name__
    if isinstance(err, OverrideParseException) and overrides:
        bad = _failing_override(overrides)
        if bad is not None:
            message = f"cannot parse override {bad!r}: {message}"
    if options:
        message += f"; valid {group or 'options'}: {', '.join(options)}"
    node = getattr(cause, "parent_node", None) if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) else None
    if node is not None:
        try:
            keys = [str(k) for k in node if str(k) != "hydra"]
        except Exception:  # the hint is optional
            keys = []
        if keys:
            message += f"; valid keys here: {', '.join(keys)}"
    return one_line(message, 600)


# Hydra's bare ValueErrors for a config group given a value that is not an option name (`deployment=null`,
# `link=5`, `~link=5`): bad input, not a crash.
_GROUP_VALUE = ("Config group override must be a string", "Config group override deletion value must be a string")


def group_value_error(err: BaseException, overrides: list[str], conf_dirs: list[Path]) -> str | None:
    """One line naming the override that gave a config group a value that is no option name, and the group's
    options; None when `err` is not Hydra's error for that."""
    if not isinstance(err, ValueError) or not str(err).startswith(_GROUP_VALUE):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups = config_groups(conf_dirs)
    for override in OverridesParser.create().parse_overrides(overrides):
        value = override.value()
        if override.is_sweep_override() or isinstance(value, (str, list, dict)) or override.key_or_group not in groups \
                or (override.is_delete() and value is None):
            continue
        group = override.key_or_group
        line = override.input_line or ""
        text = line.split("=", 1)[1] if "=" in line else repr(value)
        return (f"'{line}': {group} is a config group: give the name of one of its options, not {text}; "
                f"valid {group}: {', '.join(groups[group])}")
    return f"a config group was given a value that is not the name of one of its options ({one_line(str(err))})"


def _prog(task: Callable[..., Any]) -> str:
    """The command's name as its console script is called: `python -m harness.plan` is harness-plan (the
    task's module is then `__main__`: its spec names the module run)."""
    spec = getattr(sys.modules.get(task.__module__), "__spec__", None)
    module = spec.name if spec is not None else task.__module__
    return "harness" if module in ("harness.cli", "harness.__main__", "__main__") else module.replace(".", "-")


class _Stderr:
    """sys.stderr, minus Hydra's `Error executing job with overrides: [...]` line (we print one line
    that names the job instead)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.job: str | None = None

    def write(self, text: str) -> int:
        if text.startswith(_JOB_LINE):
            job = text[len(_JOB_LINE):].strip()
            try:
                self.job = " ".join(ast.literal_eval(job))
            except (ValueError, SyntaxError, TypeError):
                self.job = job
            return len(text)
        return self.inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _parse_args_or_exit(prog: str) -> Any:
    """Hydra's own command-line parser, with its usage errors as one line and exit status 2."""
    from hydra._internal.utils import get_args_parser

    parser, usage = get_args_parser(), io.StringIO()
    try:
        with contextlib.redirect_stderr(usage):
            return parser.parse_args()
    except SystemExit as exc:
        if exc.code in (0, None):  # not a usage error
            sys.stderr.write(usage.getvalue())
            raise
        # argparse wrote its usage and `<prog>: error: <message>`: keep the message
        message = usage.getvalue().strip().splitlines()[-1].split(": error: ", 1)[-1] if usage.getvalue() else ""
        sys.stderr.write(f"error: {prog}: {one_line(message)} (see {prog} --help)\n")
        raise SystemExit(EXIT_BAD_INPUT) from None


def hydra_entry(config_name: str = "config") -> Callable[[Callable[[Any], Any]], Callable[[], None]]:
    """Wrap `task(cfg)` as a console-script `main()` with Hydra's CLI (overrides, -m, --help)."""

    def decorate(task: Callable[[Any], Any]) -> Callable[[], None]:
        prog = _prog(task)

        @functools.wraps(task)
        def body(cfg: Any) -> Any:
            from harness.schema import validate_config

            try:
                validate_config(cfg)  # every value in its range, before anything runs
                return task(cfg)
            except Exception as err:
                if _input_cause(err) is None and not _is_config_error(err) and path_error(err) is None \
                        and yaml_error(err) is None and not hasattr(err, "harness_traceback"):
                    err.harness_traceback = save_traceback(err, _output_dir())  # type: ignore[attr-defined]
                    err.harness_where = crash_site(err)  # type: ignore[attr-defined]  # a worker's traceback is lost
                raise

        def main() -> None:
            restore_signals = install_signal_handlers()
            user_full_error = os.environ.get("HYDRA_FULL_ERROR")
            stderr = _Stderr(sys.stderr)
            args: Any = None
            try:
                import hydra

                from harness.schema import register_configs

                _select_help(task.__module__)
                args = _parse_args_or_exit(prog)
                register_configs(args.config_name or config_name)  # the schemas this command's config uses
                hydra_main = hydra.main(version_base=None, config_path=CONF_DIR, config_name=config_name)(body)
                os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing; we print one line
                sys.stderr = stderr
                if task.__module__ in RUN_COMMANDS and not getattr(args, "multirun", False):
                    from harness.runs.signals import SignalHold

                    with SignalHold():  # a signal in Hydra's job set-up stops the run at its start, files written
                        hydra_main()
                else:
                    hydra_main()
            except SystemExit as exc:
                if exc.code == EXIT_INTERRUPTED:
                    forget_interrupt()
                raise
            except BaseException as err:  # every way out gets a status and one line
                sys.stderr = stderr.inner
                if user_full_error and not interrupted(err):
                    import traceback

                    traceback.print_exc()
                multirun = bool(getattr(args, "multirun", False))
                conf_dirs = [Path(CONF_DIR)] + ([Path(args.config_dir)] if getattr(args, "config_dir", None) else [])
                status, line = _status(err, prog, list(getattr(args, "overrides", None) or []),
                                       stderr.job if multirun else None, conf_dirs)
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
                if status == EXIT_INTERRUPTED:
                    forget_interrupt()
                raise SystemExit(status) from None
            finally:
                sys.stderr = stderr.inner
                atexit.unregister(_exiting)  # registered last, so it runs first at exit
                atexit.register(_exiting)
                restore_signals()
                if user_full_error is None:
                    os.environ.pop("HYDRA_FULL_ERROR", None)
                else:
                    os.environ["HYDRA_FULL_ERROR"] = user_full_error

        main.__doc__ = task.__doc__
        main.task = task  # type: ignore[attr-defined]
        return main

    return decorate


def _exiting() -> None:
    """At interpreter exit, once a command has finished (its status is set): a signal now has
    nothing left to stop, so SIGINT and SIGTERM are ignored (the handlers main() put back would
    kill the process with -2 or print a traceback while Python tears down its modules, the longest
    part of exiting)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            pass


# The commands whose job is one run (requests.parquet, summary.json, ...): from their first line a signal is
# held, so one that comes while Hydra sets up the job (its directory made, the run not begun) still ends in a
# run stopped at its start with its summary (harness/runs/signals.py).
RUN_COMMANDS = ("harness.cli", "harness.load")


def _output_dir() -> str | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.output_dir)
    except Exception:
        return None


def _status(err: BaseException, prog: str, overrides: list[str], job: str | None,
            conf_dirs: list[Path]) -> tuple[int, str]:
    if interrupted(err):
        return EXIT_INTERRUPTED, "interrupted"
    from harness.sweep_check import SweepRefused

    if isinstance(err, SweepRefused):  # a job the sweep's check composed could not run: that job's error
        overrides = err.overrides
        err = err.error
    where = f"job {job}: " if job else ""
    cause = _input_cause(err)
    if cause is not None:
        return EXIT_BAD_INPUT, f"error: {where}{one_line(str(cause))}"
    line = yaml_error(err)
    if line is not None:
        return EXIT_BAD_INPUT, f"error: {where}{line}"
    if _is_config_error(err):
        return EXIT_BAD_INPUT, f"error: {where}{fold_hydra_error(err, overrides)}"
    line = path_error(err) or group_value_error(err, overrides, conf_dirs)
    if line is not None:
        return EXIT_BAD_INPUT, f"error: {where}{line}"
    return 1, f"error: {where}{describe_crash(err, prog)}"


def _help_page(module: str) -> str:
    """The name of this command's help page (conf/hydra/help/<name>.yaml)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)  # `python -m harness.plan`: __main__ -> harness.plan
    name = (spec.name if spec is not None else module).rsplit(".", 1)[-1]
    return "harness" if name in ("cli", "__main__") else name


def _select_help(module: str) -> None:
    """`--hydra-help`-free `--help` through Hydra shows this command's own page, not its config dump."""
    name = _help_page(module)
    if ("--help" in sys.argv or "-h" in sys.argv) and (Path(CONF_DIR) / "hydra" / "help" / f"{name}.yaml").exists():
        sys.argv.insert(1, f"hydra/help={name}")
