"""Command line: ``python -m mmtoken claims`` and ``python -m mmtoken figures``.

``claims`` reports the results recorded when the chapters ran (the results cache), evaluating only the
claims with no record valid for today's code and scale; ``claims --recompute`` evaluates every selected
claim again. It is one of the book's own runs (:func:`mmtoken.config.recording_run`): a fresh process of the
package's code, so what it evaluates is recorded in the ledger.

Exit status: 0 success, 1 a claim failed, 2 bad usage or environment (the message names the argument or
variable: an unknown claim or figure, an unusable ``MMTOKEN_DEVICE``, ``MMTOKEN_DATA`` or ``MMTOKEN_SCALE``,
an output folder that cannot be written).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

from mmtoken import config
from mmtoken.book import ledger


class UsageError(ValueError):
    """Bad command-line arguments or environment: reported in one line, exit status 2."""


def _check_environment() -> None:
    """Fail early, in one line, on environment variables no claim or figure could run with."""
    config.scale()
    if os.environ.get("MMTOKEN_DEVICE", "").strip():  # only a named device needs checking (and torch)
        config.device()
    config.progress_enabled(0)
    if os.environ.get("MMTOKEN_DATA"):
        config.data_dir()


def _writable_folder(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out {path} cannot be written ({exc.strerror or exc})") from None
    return path


def _claims(args) -> int:
    from mmtoken.chapters import load_all

    load_all()
    unknown = [o for o in args.only or () if not ledger.select([o])]
    if unknown:
        raise UsageError(f"--only: no claim id is or starts with {', '.join(map(repr, unknown))}")
    # recorded results (evaluated when the chapters ran) unless missing, stale or --recompute
    with config.recording_run():
        results = ledger.run_claims(args.only) if args.recompute else ledger.recorded(args.only)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(ledger.format_table(results))
    return 0 if all(ledger.acceptable(r) for r in results) else 1


def _figures(args) -> int:
    out = _writable_folder(Path(args.out))  # before any figure is computed
    written = 0
    for module in _figure_modules(args.only):
        for fig_name, make in importlib.import_module(module).FIGURES.items():
            if args.only and not any(o in fig_name or o == module.rpartition(".")[2] for o in args.only):
                continue
            # drawn from the chapter's results, which the results cache keeps: a redraw is cheap
            for path in _draw(make, out / fig_name):
                print(path)
            written += 1
    if written == 0:
        print(f"no figure matches {args.only}", file=sys.stderr)
        return 2
    return 0


def _draw(make, stem: Path) -> list[str]:
    """Draw one ``FIGURES`` entry in the book's theme and save it as PNG and PDF."""
    import matplotlib.pyplot as plt

    from mmtoken.book.plotting import save, set_theme, use_headless

    use_headless()
    set_theme()
    fig = make()  # every entry takes no argument: it runs, or reads, its own results
    fig = fig if hasattr(fig, "savefig") else fig.figure
    try:
        return save(fig, str(stem))
    finally:
        plt.close(fig)


def _figure_modules(only: list[str] | None) -> list[str]:
    """The chapters' modules that may hold the figures ``only`` (all without ``only``): read as text, without
    importing anything, those whose name is asked for or whose source names an asked figure."""
    from mmtoken import chapters

    out = []
    for name in chapters.modules():
        source = (Path(chapters.__file__).parent / f"{name}.py").read_text(encoding="utf-8")
        if not only or any(o == name or o in source for o in only):
            out.append(f"{chapters.__name__}.{name}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmtoken", description=__doc__)
    parser.add_argument("--scale", choices=config.SCALES, help="size of the runs (default: MMTOKEN_SCALE or quick)")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("claims", help="run the claims ledger")
    c.add_argument(
        "--only",
        nargs="+",
        action="extend",
        metavar="PREFIX",
        help="claim id prefixes, e.g. core A.global (repeatable)",
    )
    c.add_argument("--json", action="store_true", help="print a JSON list")
    c.add_argument(
        "--recompute",
        action="store_true",
        help="evaluate every selected claim again instead of reading its recorded result",
    )
    c.set_defaults(func=_claims)
    f = sub.add_parser("figures", help="write every figure of the book as PNG and PDF")
    f.add_argument("--only", nargs="+", action="extend", metavar="NAME", help="figure names or chapter modules")
    f.add_argument("--out", default="figures", help="output folder (default: figures)")
    f.add_argument("--scale", choices=config.SCALES, dest="sub_scale")
    f.set_defaults(func=_figures)
    args = parser.parse_args(argv)
    scale = getattr(args, "sub_scale", None) or args.scale
    from mmtoken.datasets.download import DataFolderError

    try:
        if args.scale and getattr(args, "sub_scale", None) and args.scale != args.sub_scale:
            raise UsageError(f"--scale {args.scale} and --scale {args.sub_scale}: give one scale")
        if args.only is not None and any(not o.strip() for o in args.only):
            raise UsageError(f"--only {args.only}: an empty name would match everything; name a prefix")
        if scale:
            config.set_scale(scale)
        _check_environment()
        return args.func(args)
    except (UsageError, config.ConfigError, DataFolderError) as exc:
        print(f"mmtoken {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        print(f"mmtoken {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
