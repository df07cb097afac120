"""One citation style in text and list: author-year.

The text cites "[Tarzanagh et al., 2023]" (``bibtex_reference_style: author_year``),
but the list used pybtex's default ``alpha`` labels ("[TLZO23]"). This registers the
formatting style ``author_year`` (``bibtex_default_style``): pybtex's ``unsrt`` entries
(which link ``eprint`` to arXiv, ``doi`` to doi.org and print ``url``), labelled
"Surname, year", "Surname and Surname, year" or "Surname et al., year" as in the
text, with a, b, ... when two labels would coincide, sorted by author, year and title.
"""
from __future__ import annotations

import string
from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


def _surname(person) -> str:
    return " ".join(person.prelast_names + person.last_names)


def author_year_label(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(p) for p in persons]
    if not names:
        who = entry.fields.get("key", entry.key)
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year_label(e) for e in entries]
        count, seen = Counter(labels), Counter()
        for label in labels:
            if count[label] > 1:
                yield label + string.ascii_lowercase[seen[label]]
                seen[label] += 1
            else:
                yield label


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "author_year"
    default_sorting_style = "author_year_title"


def setup(app):
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabelStyle)
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
