"""Command line: ``python -m mmtoken claims`` and ``python -m mmtoken figures``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import config, ledger


def _claims(args) -> int:
    from .experiments import load_all

    load_all()
    selected = ledger.select(args.only)
    if not selected:
        print(f"no claim matches {args.only}", file=sys.stderr)
        return 2
    results = ledger.run_claims(args.only)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(ledger.format_table(results))
    return 0 if all(ledger.acceptable(r) for r in results) else 1


def _figures(args) -> int:
    import matplotlib.pyplot as plt

    from .experiments import load_all
    from .plotting import save, set_theme, use_headless

    use_headless()
    set_theme()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, module in load_all().items():
        for fig_name, make in getattr(module, "FIGURES", {}).items():
            if args.only and not any(o in fig_name or o == name for o in args.only):
                continue
            fig = _make_figure(module, make)
            for path in save(fig, str(out / fig_name)):
                print(path)
            plt.close(fig)
            written += 1
    if written == 0:
        print(f"no figure matches {args.only}", file=sys.stderr)
        return 2
    return 0


def _make_figure(module, make):
    """Call a ``FIGURES`` entry: with no argument, or with the module's ``run()`` result."""
    import inspect

    required = [p for p in inspect.signature(make).parameters.values()
                if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    fig = make(module.run()) if required else make()
    return fig if hasattr(fig, "savefig") else fig.figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmtoken", description=__doc__)
    parser.add_argument("--scale", choices=config.SCALES, help="size of the runs (default: MMTOKEN_SCALE or quick)")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("claims", help="run the claims ledger")
    c.add_argument("--only", nargs="*", help="claim id prefixes, e.g. core A.global")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    c.set_defaults(func=_claims)
    f = sub.add_parser("figures", help="write every figure of the book as PNG and PDF")
    f.add_argument("--only", nargs="*", help="figure names or experiment modules")
    f.add_argument("--out", default="figures", help="output folder (default: figures)")
    f.add_argument("--scale", choices=config.SCALES, dest="sub_scale")
    f.set_defaults(func=_figures)
    args = parser.parse_args(argv)
    scale = getattr(args, "sub_scale", None) or args.scale
    if scale:
        config.set_scale(scale)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
