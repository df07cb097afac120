#!/usr/bin/env python3
"""Draw the book's logo and favicon: a selected token (filled) separated from the others by a max-margin band.

Writes ``book/_static/logo.svg`` (site logo and favicon) and ``book/_static/logo.png``
(the Open Graph image, 512x512). Deterministic; re-run only to change the design.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "book" / "_static"
BLUE, GREY, ORANGE = "#1f5fa8", "#9aa5b1", "#e07b00"


def draw():
    fig = plt.figure(figsize=(2, 2))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.axis("off")
    ax.add_patch(plt.Circle((5, 5), 4.9, color="white", ec=BLUE, lw=6))
    # the margin band and the separating direction
    ax.fill([1.2, 8.8, 8.8, 1.2], [3.4, 7.2, 5.8, 2.0], color=BLUE, alpha=0.15, lw=0)
    ax.plot([1.2, 8.8], [2.7, 6.5], color=BLUE, lw=4, solid_capstyle="round")
    # the other tokens below, the selected token above the band
    for x, y in [(3.0, 1.9), (5.2, 2.8), (7.2, 3.4)]:
        ax.add_patch(plt.Circle((x, y), 0.75, color=GREY))
    ax.add_patch(plt.Circle((3.8, 6.9), 1.15, color=ORANGE))
    return fig


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    fig = draw()
    plt.rcParams["svg.hashsalt"] = "mmtoken"  # stable ids in the SVG
    fig.savefig(OUT / "logo.svg", transparent=True, metadata={"Date": None, "Creator": None})
    fig.savefig(OUT / "logo.png", dpi=256, transparent=False, facecolor="white", metadata={"Software": None})
    print(f"wrote {OUT / 'logo.svg'} and {OUT / 'logo.png'}")


if __name__ == "__main__":
    main()
