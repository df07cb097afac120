"""The book's machinery: what checks, stores and shows the results; it computes none.

Modules:

- :mod:`competitors`: The competitor of each claim: its check applied to the nearest wrong answer, evaluated and recorded beside it.
- :mod:`fingerprint`: Code fingerprints that cover a computation, not the modules around it.
- :mod:`html_tables`: The book's tables as HTML: the claims ledger and the benchmark tables (nothing here computes a result).
- :mod:`ledger`: The claims ledger: every numerical statement of the book as a check in code.
- :mod:`pages`: The book's pages as the reader sees them: their order, numbers and titles, and where each claim is stated.
- :mod:`plotting`: One theme and the figure types the book repeats.
- :mod:`report`: The claims and the measured numbers as text, the same on any machine: what a chapter prints (:func:`bound`, :func:`above`, :func:`on_grid`, its closing :func:`chapter_claims`) and what the claims appendix prints and stores (:func:`summary_line`, :func:`claims_text`, :func:`ledger_payload`, which :mod:`mmtoken.book.html_tables` renders). Nothing here computes a result.
- :mod:`resultcache`: A results cache that knows what it holds.
- :mod:`scale_runs`: The chapters' runs at paper scale, as ``benchmarks/paper_scale.py`` (``make scale-times``) measured them and as the claims ledger shows them beside each claim's status (nothing here computes or runs anything).
- :mod:`text_tables`: The book's tables as Markdown, for the builds that show no HTML (the PDF) and for a notebook's text/markdown output.
- :mod:`tolerance`: Stored outputs of chaotic training, compared with a tolerance: the text exactly, the numbers within bounds.
"""

__all__: list[str] = []
