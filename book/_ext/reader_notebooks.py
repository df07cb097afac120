"""Reader notebooks: plain Jupyter notebooks for Colab, Binder and download.

The book's chapters are MyST notebooks; their paired ``.ipynb`` are the nbval
references and keep MyST syntax (roles, ``{prf:theorem}`` fences, ``(label)=``
targets, captions in cell metadata) that Jupyter and Colab do not render. At the end
of every HTML build this extension writes, for each chapter, a notebook a reader can
open anywhere, into ``<outdir>/notebooks/`` (published with the site and, by CI, to
the ``notebooks`` branch that the launch buttons open):

- theorem, proof, exercise and admonition boxes become bold-headed blockquotes,
  solutions collapsed ``<details>`` blocks;
- labelled equations get ``\\tag{n}`` with the book's number, math macros of
  ``mathjax3_config`` are expanded;
- ``{eq}``, ``{ref}``, ``{numref}``, ``{doc}``, ``{prf:ref}`` and ``{cite}`` become text
  with a link to the online page; the text and number are the ones Sphinx renders,
  since each reference is resolved by its own domain;
- figure captions (``mystnb.figure`` cell metadata) become a markdown cell under the
  figure cell; ``{include}`` snippets are inlined;
- hidden cells (``remove-cell``, ``remove-input``, ``hide-input``) stay, collapsed, so
  the notebook still runs; the hidden install cell becomes a visible one pinned to the
  release (its output hidden), from ``scripts/project_meta.py``.

Anything MyST that the conversion does not know raises :class:`ReaderError`, so a
new construct fails the build instead of reaching a reader. The conversion itself
(:class:`Converter`) takes the resolver as a callable and runs without Sphinx.
"""
from __future__ import annotations

import posixpath
import re
import sys
import time
from pathlib import Path
from typing import Callable

import nbformat

OUT = "notebooks"  # under the HTML output directory
THEOREM_KINDS = {
    "theorem", "lemma", "proposition", "corollary", "definition", "remark", "assumption",
    "conjecture", "axiom", "example", "property", "observation", "criterion", "algorithm", "notation",
}
ADMONITIONS = {"note", "tip", "warning", "important", "hint", "caution", "attention", "danger", "error",
               "seealso"}
HIDE_INPUT = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
HIDE_OUTPUT = {"remove-output", "hide-output", "hide-cell"}

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\s*(?P<info>\S.*?)?\s*$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[^}\s]+)\}\s*(?P<arg>.*)$")
# a role, or an inline code span (left as is); scanned left to right so that the
# backticks of a role are never taken for a code span
_ROLE_OR_CODE = re.compile(r"\{(?P<role>[A-Za-z][\w:+-]*)\}`(?P<content>[^`]+)`|(?P<code>(?P<ticks>`+)[^`].*?(?P=ticks))", re.S)
_TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
_LABELLED_MATH = re.compile(r"^\$\$(?P<body>.*?)\$\$[ \t]*\((?P<label>[^()\s]+)\)[ \t]*$", re.S | re.M)
_EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


class ReaderError(ValueError):
    """MyST that the reader-notebook conversion cannot turn into plain notebook markdown."""


def reader_path(docname: str) -> str:
    """Path of a chapter's reader notebook, relative to the notebooks folder / branch.

    ``book/part1/02_global`` -> ``part1/02_global.ipynb``.
    """
    return (docname[len("book/"):] if docname.startswith("book/") else docname) + ".ipynb"


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.strip("\n").splitlines())


# A resolver takes (role, target, explicit text or None) and returns markdown (text + link).
Resolver = Callable[[str, str, "str | None"], str]


class Converter:
    """Turn one chapter (a MyST notebook read as nbformat) into a reader notebook.

    Parameters
    ----------
    resolve : Resolver
        ``resolve(role, target, text)`` -> markdown for a cross-reference role
        (``eq``, ``ref``, ``numref``, ``doc``, ``prf:ref``, ``cite``, ``cite:p``,
        ``cite:t``); ``text`` is the explicit title or None.
    number : callable
        ``number(kind, label)`` -> the book's number of a labelled equation
        (``"eq"``), figure (``"fig"``), theorem-like box (``"prf"``) or exercise
        (``"exercise"``) as a string, e.g. ``"2.1"``; None when it has none.
    read_include : callable
        ``read_include(path)`` -> text of an ``{include}`` target (path as written).
    install_source : str
        Source of the visible install cell (replaces the hidden one).
    macros : dict
        LaTeX macros without arguments (``{"softmax": "\\operatorname{softmax}"}``),
        expanded in markdown.
    header : str
        Markdown of a first cell (where the notebook comes from); empty for none.
    """

    def __init__(self, resolve: Resolver, number, read_include, install_source: str,
                 macros: dict | None = None, header: str = ""):
        self.resolve, self.number, self.read_include = resolve, number, read_include
        self.install_source = install_source
        self.header = header
        self.macros = {}
        for name, value in (macros or {}).items():
            if not isinstance(value, str):
                raise ReaderError(f"math macro \\{name} takes arguments; only argument-free macros are expanded")
            self.macros[name] = value

    # ------------------------------------------------------------------ notebook
    def convert(self, nb: nbformat.NotebookNode, is_install_cell: Callable[[str], bool]) -> nbformat.NotebookNode:
        out = nbformat.v4.new_notebook()
        out.metadata = {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        }
        cells = []
        if self.header:
            cells.append(nbformat.v4.new_markdown_cell(self.header))
        installed = False
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                text = self.markdown(cell.source)
                if text.strip():
                    cells.append(nbformat.v4.new_markdown_cell(text))
            elif cell.cell_type == "code":
                if is_install_cell(cell.source):
                    cells.append(self._install_cell())
                    installed = True
                    continue
                cells.extend(self.code(cell))
            else:  # raw cells carry nothing for a reader
                continue
        if not installed:  # no hidden install cell: put one before the first code cell
            first = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
            cells.insert(first, self._install_cell())
        out.cells = cells
        for i, c in enumerate(out.cells):  # stable ids: the same source gives the same file
            c["id"] = f"cell-{i}"
        return out

    def _install_cell(self) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(self.install_source)
        # visible, output collapsed (Jupyter, JupyterLab) and tagged like QuantEcon's install cells
        cell.metadata = {"tags": ["hide-output"], "jupyter": {"outputs_hidden": True}}
        return cell

    def code(self, cell) -> list:
        tags = set(cell.metadata.get("tags", []))
        meta: dict = {}
        if tags & HIDE_INPUT:
            meta["jupyter"] = {"source_hidden": True}
        if tags & HIDE_OUTPUT:
            meta.setdefault("jupyter", {})["outputs_hidden"] = True
        kept = sorted(t for t in tags if not t.startswith("nbval"))
        if kept:
            meta["tags"] = kept
        new = nbformat.v4.new_code_cell(cell.source, metadata=meta)
        out = [new]
        figure = (cell.metadata.get("mystnb") or {}).get("figure")
        if figure and figure.get("caption"):
            name = figure.get("name")
            num = self.number("fig", name) if name else None
            head = f"**Figure {num}.**" if num else "**Figure.**"
            anchor = f'<a id="{name}"></a>\n\n' if name else ""
            out.append(nbformat.v4.new_markdown_cell(f"{anchor}{head} {self.inline(figure['caption'].strip())}"))
        return out

    # ------------------------------------------------------------------ markdown
    def markdown(self, text: str) -> str:
        """Convert one markdown cell (block level, then inline)."""
        return self._blocks(text.splitlines()).strip("\n")

    def _blocks(self, lines: list[str]) -> str:
        out: list[str] = []
        i = 0
        prose: list[str] = []

        def flush():
            if prose:
                out.append(self.inline("\n".join(prose)))
                prose.clear()

        while i < len(lines):
            line = lines[i]
            m = _FENCE_OPEN.match(line)
            if m:
                fence, info = m.group("fence"), (m.group("info") or "")
                end = self._close(lines, i + 1, fence)
                body = lines[i + 1:end]
                flush()
                d = _DIRECTIVE.match(info)
                if d:
                    out.append(self.directive(d.group("name"), d.group("arg").strip(), body))
                elif fence.startswith(":"):
                    raise ReaderError(f"colon fence without a directive: {line!r}")
                else:  # a plain code block: verbatim
                    out.append("\n".join(lines[i:end + 1]))
                i = end + 1
                continue
            t = _TARGET.match(line)
            if t:
                flush()
                out.append(f'<a id="{t.group("label")}"></a>')
                i += 1
                continue
            prose.append(line)
            i += 1
        flush()
        return "\n\n".join(part.strip("\n") for part in out if part.strip())

    @staticmethod
    def _close(lines: list[str], start: int, fence: str) -> int:
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        for j in range(start, len(lines)):
            if closing.match(lines[j]):
                return j
        raise ReaderError(f"unclosed fence {fence!r} (opened before line {start})")

    @staticmethod
    def _options(body: list[str]) -> tuple[dict, list[str]]:
        opts: dict = {}
        i = 0
        if body and body[0].strip() == "---":  # YAML option block
            j = body.index("---", 1) if "---" in body[1:] else None
            if j is None:
                raise ReaderError("unclosed --- option block in a directive")
            import yaml
            opts = yaml.safe_load("\n".join(body[1:j])) or {}
            i = j + 1
        else:
            while i < len(body):
                m = re.match(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$", body[i])
                if not m:
                    break
                opts[m.group("key")] = m.group("value").strip()
                i += 1
        return opts, body[i:]

    def directive(self, name: str, arg: str, body: list[str]) -> str:
        opts, content = self._options(body)
        inner = self._blocks(content)
        kind = name.split(":", 1)[1] if name.startswith("prf:") else None
        if kind in THEOREM_KINDS:
            label = opts.get("label")
            num = self.number("prf", label) if label else None
            head = f"**{kind.capitalize()}{' ' + num if num else ''}**"
            if arg:
                head += f" ({self.inline(arg)})"
            anchor = f'<a id="{label}"></a>\n\n' if label else ""
            return anchor + _quote(f"{head}\n\n{inner}")
        if name == "prf:proof":
            return _quote(f"**Proof.** {inner}".rstrip() + " ∎")
        if name in ("exercise", "exercise-start"):
            label = opts.get("label")
            num = self.number("exercise", label) if label else None
            head = f"**Exercise{' ' + num if num else ''}**" + (f" ({self.inline(arg)})" if arg else "")
            anchor = f'<a id="{label}"></a>\n\n' if label else ""
            if name == "exercise-start":
                return anchor + head
            return anchor + _quote(f"{head}\n\n{inner}")
        if name in ("solution", "solution-start"):
            if not arg:
                raise ReaderError("{solution} needs the label of its exercise")
            num = self.number("exercise", arg)
            head = f"Solution to Exercise {num}" if num else "Solution"
            if name == "solution-start":
                return f"**{head}**"
            if "dropdown" in str(opts.get("class", "")):
                return f"<details>\n<summary><b>{head}</b></summary>\n\n{inner}\n\n</details>"
            return _quote(f"**{head}**\n\n{inner}")
        if name in ("solution-end", "exercise-end"):
            return ""
        if name == "admonition":
            return _quote(f"**{self.inline(arg)}**\n\n{inner}" if arg else inner)
        if name in ADMONITIONS:
            title = "See also" if name == "seealso" else name.capitalize()
            return _quote(f"**{title}**\n\n{inner}")
        if name == "include":
            return self._blocks(self.read_include(arg).splitlines())
        if name in ("math",):
            label = opts.get("label")
            tag = f" \\tag{{{self.number('eq', label)}}}" if label else ""
            anchor = f'<a id="equation-{label}"></a>\n\n' if label else ""
            return anchor + self._math("$$\n" + "\n".join(content).strip() + tag + "\n$$")
        if name in ("code-block", "code", "sourcecode"):
            return "```" + arg + "\n" + "\n".join(content) + "\n```"
        if name == "claims-ledger":   # the book's tables come from glued data a notebook does not have
            return ("The cell above prints the ledger as text. The book shows it as one table per "
                    f"chapter on {self.resolve('claim', '', 'its ledger page')}; here, "
                    "`from mmtoken.book import html_tables; from IPython.display import HTML`, then "
                    "`HTML(html_tables.claims_html(results))`, shows the same tables.")
        raise ReaderError(f"directive {{{name}}} has no reader-notebook form; add one in {__name__}")

    # ------------------------------------------------------------------ inline
    def inline(self, text: str) -> str:
        """Labelled display math, roles and macros of a prose block."""
        def math(m: re.Match) -> str:
            label = m.group("label")
            num = self.number("eq", label)
            if not num:
                raise ReaderError(f"equation {label!r} has no number")
            return f'<a id="equation-{label}"></a>\n\n$${m.group("body").rstrip()} \\tag{{{num}}}\n$$'
        text = _LABELLED_MATH.sub(math, text)
        text = _ROLE_OR_CODE.sub(lambda m: m.group("code") or self._role(m), text)
        return self._math(text)

    def _math(self, text: str) -> str:
        for name, value in self.macros.items():
            text = re.sub(rf"\\{name}(?![A-Za-z])", lambda _m, v=value: v, text)
        return text

    def _role(self, m: re.Match) -> str:
        role, content = m.group("role"), m.group("content")
        if role == "math":
            return f"${content}$"
        e = _EXPLICIT.match(content)
        text, target = (e.group("text"), e.group("target")) if e and e.group("text") else (None, content)
        if role in ("eq", "ref", "numref", "doc", "prf:ref", "claim") or role == "cite" or role.startswith("cite:"):
            return self.resolve(role, target.strip(), text)
        raise ReaderError(f"role {{{role}}} has no reader-notebook form; add one in {__name__}")


# ============================================================================ Sphinx glue

def _node_markdown(node, absolute: Callable[[str], str]) -> str:
    """A resolved inline docutils node as markdown (text and links)."""
    from docutils import nodes

    if isinstance(node, nodes.Text):
        return node.astext()
    inner = "".join(_node_markdown(c, absolute) for c in node.children)
    if isinstance(node, nodes.reference):
        url = node.get("refuri") or ("#" + node["refid"] if node.get("refid") else None)
        return f"[{inner}]({absolute(url)})" if url else inner
    if isinstance(node, nodes.emphasis):
        return f"*{inner}*"
    if isinstance(node, nodes.strong):
        return f"**{inner}**"
    if isinstance(node, nodes.literal):
        return f"`{node.astext()}`"
    return inner


class SphinxResolver:
    """Resolve a chapter's references with Sphinx's own domains (the text the HTML shows)."""

    ROLES = {"eq": ("math", "eq"), "ref": ("std", "ref"), "numref": ("std", "numref"),
             "doc": ("std", "doc"), "prf:ref": ("prf", "ref")}

    def __init__(self, app, docname: str, site: str):
        self.app, self.docname, self.site = app, docname, site.rstrip("/") + "/"

    def absolute(self, url: str) -> str:
        if re.match(r"^[a-z]+:", url):
            return url
        page = self.docname + ".html"
        path, _, frag = url.partition("#")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) if path else page
        return self.site + target + (f"#{frag}" if frag else "")

    def _resolve(self, role: str, target: str, text: str | None):
        from docutils import nodes
        from sphinx import addnodes

        if role == "cite" or role.startswith("cite:"):
            domain, typ = "cite", (role.split(":", 1)[1] if ":" in role else "p")
        else:
            domain, typ = self.ROLES[role]
        if role in ("ref", "numref", "prf:ref"):
            target = target.lower()
        node = addnodes.pending_xref("", refdomain=domain, reftype=typ, reftarget=target,
                                     refexplicit=text is not None, refwarn=True, refdoc=self.docname)
        contnode = nodes.inline(text or target, text or target)
        node += contnode
        env = self.app.env
        res = env.get_domain(domain).resolve_xref(env, self.docname, self.app.builder, typ, target, node, contnode)
        if res is None:
            raise ReaderError(f"could not resolve {{{role}}}`{target}`")
        return res

    def __call__(self, role: str, target: str, text: str | None) -> str:
        if role == "claim":   # book/_ext/claims.py: a claim id links to its row of the ledger
            ledger = self.app.config.claims_ledger_doc
            url = self.site + ledger + ".html" + (f"#claim-{target}" if target else "")
            return f"[{text}]({url})" if text else f"[`{target}`]({url})"
        node = self._resolve(role, target, text)
        exercises = getattr(self.app.env, "sphinx_exercise_registry", {})
        if role == "ref" and text is None and exercises.get(target.lower(), {}).get("type") == "exercise":
            # {ref} to an exercise: the HTML shows "Exercise N" (sphinx-exercise's own transform,
            # which the std domain's resolution does not run), so the notebook says the same
            num = self.number("exercise", target)
            url = node.get("refuri") or ("#" + node["refid"] if node.get("refid") else "")
            if num:
                return f"[Exercise {num}]({self.absolute(url)})" if url else f"Exercise {num}"
        return _node_markdown(node, self.absolute)

    def number(self, kind: str, label: str) -> str | None:
        role = {"eq": "eq", "fig": "numref", "prf": "prf:ref", "exercise": "numref"}[kind]
        try:
            shown = self._resolve(role, label, None).astext()
        except ReaderError:
            return None
        m = re.search(r"(\d+(?:\.\d+)*)", shown)
        return m.group(1) if m else None


COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
GPU_SNIPPET = "_snippets/gpu.md"  # the "Faster on a GPU" note a chapter includes when it recommends one
# what Colab reads to open a notebook on a GPU runtime (Runtime -> Change runtime type)
GPU_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}


def reader_header(meta, docname: str, title: str, book_title: str, page_url: str) -> str:
    """The first cell of a reader notebook: an *Open in Colab* badge (a downloaded notebook's
    way back), where it comes from, the release it installs."""
    colab = meta.colab_url(reader_path(docname))
    return (f"[![Open In Colab]({COLAB_BADGE})]({colab})\n\n"
            f"*{title}*: a notebook of the book [{book_title}]({meta.site}), "
            f"generated from [its page]({page_url}) for mmtoken {meta.version}. "
            f"Run the first code cell to install the package.")


def needs_gpu(source: str) -> bool:
    """Whether a chapter (its MyST source) recommends a GPU: it includes the GPU note."""
    return re.search(r"^```\{include\}\s*\S*" + re.escape(GPU_SNIPPET) + r"\s*$", source, re.M) is not None


def _scripts_dir(app) -> Path:
    return Path(app.srcdir) / "scripts"


def project_meta(app):
    """The project's identity from ``scripts/project_meta.py`` (reads ``pyproject.toml``)."""
    scripts = str(_scripts_dir(app))
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import project_meta as pm

    return pm, pm.load(Path(app.srcdir))


def chapter_docnames(app) -> list[str]:
    """Documents of the build that are notebooks (MyST with a kernelspec)."""
    return sorted(d for d in app.env.found_docs
                  if "kernelspec" in app.env.metadata.get(d, {}) and app.env.doc2path(d).endswith(".md"))


def write_reader_notebooks(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from myst_nb.core.read import read_myst_markdown_notebook
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    started = time.perf_counter(), time.process_time()
    pm, meta = project_meta(app)
    macros = (((app.config.mathjax3_config or {}).get("tex") or {}).get("macros")) or {}
    outdir = Path(app.outdir) / OUT
    titles = app.env.titles
    written = 0
    for docname in chapter_docnames(app):
        src = Path(app.env.doc2path(docname))
        resolver = SphinxResolver(app, docname, meta.site)
        title = titles[docname].astext() if docname in titles else docname
        header = reader_header(meta, docname, title, app.config.html_title, resolver.absolute(""))
        conv = Converter(
            resolve=resolver, number=resolver.number,
            read_include=lambda p, s=src: (s.parent / p).read_text(),
            install_source=pm.install_cell(meta, pm.chapter_extras(src.read_text(), meta)),
            macros=macros, header=header)
        nb = read_myst_markdown_notebook(src.read_text())
        try:
            reader = conv.convert(nb, is_install_cell=lambda s: pm.is_install_cell(s, meta))
        except ReaderError as err:
            raise ReaderError(f"{docname}: {err}") from None
        if needs_gpu(src.read_text()):
            reader.metadata.update(GPU_METADATA)
        target = outdir / reader_path(docname)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.validate(reader)
        target.write_text(nbformat.writes(reader) + "\n")
        written += 1
    wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
    log.info(f"reader notebooks: {written} written to {outdir} in {wall:.2f} s ({cpu:.2f} s CPU)")


def setup(app):
    app.connect("build-finished", write_reader_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
