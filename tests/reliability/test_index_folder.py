"""An index folder as someone may send it, and corpora as a new user gives them (issue 46 items 1,
3-7, 13; issue 47 item 9): a planted symlink is never written through, the manifest's ``run`` is
never resolved as config, JSON corpora are refused, write failures and damage are one line, a
read-only index is searched in memory, and a refused build leaves nothing that blocks the rerun."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

import runstore as storage
from rl.tool.corpus_files import CorpusError, iter_chunks, resolve_files
from rl.tool.corpus_index import CorpusIndex
from rl.tool.corpus_search import faiss_module
from rl.tool.retriever import QRAGRetriever, fill_run_from_index
from rl.tool.shard_store import IndexStoreError
from runstore import DiskFullError, NotWritableError
from tests.reliability.test_disk_full import FullAfter
from tests.tool import test_corpus_index as tool
from tests.tool.conftest import eval_cfg
from tests.tool.test_corpus_index import BOOK, settings

none_run = tool.none_run  # (a fixture: the tool tests' tiny run without positions)
needs_faiss = pytest.mark.skipif(faiss_module() is None, reason="faiss (the optional extra `index`) not installed")


@pytest.fixture(scope="module")
def plain(none_run: Path) -> QRAGRetriever:
    return QRAGRetriever.from_eval_config(eval_cfg(none_run))


def build(retriever: QRAGRetriever, folder: Path, files=(BOOK,), **changes):
    return CorpusIndex.build(retriever, folder, [str(f) for f in files], settings=settings(**changes), progress=False)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the index folder that a planted link points at."""
    path = tmp_path / "victim.txt"
    path.write_text("the user's file\n")
    return path


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def save_manifest(folder: Path, m: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(m))


# -- item 1: temporary files ------------------------------------------------------------------
def test_atomic_write_takes_a_new_unpredictable_name(tmp_path: Path, victim: Path, monkeypatch) -> None:
    target = tmp_path / "manifest.json"
    names = []
    real = storage._open_for_write
    monkeypatch.setattr(storage, "_open_for_write", lambda p: names.append(p.name) or real(p))
    storage.atomic_write_text(target, "one")
    storage.atomic_write_text(target, "two")
    assert names[0] != names[1] and all(n.startswith(".manifest.json.tmp") for n in names)
    monkeypatch.setattr(storage, "_open_for_write", real)
    monkeypatch.setattr(storage.secrets, "randbits", lambda bits: 7)  # a link planted at the very name
    (tmp_path / ".manifest.json.tmp7").symlink_to(victim)
    with pytest.raises(FileExistsError):
        storage.atomic_write_text(target, "three")
    assert victim.read_text() == "the user's file\n" and target.read_text() == "two"
    assert (tmp_path / ".manifest.json.tmp7").is_symlink()  # not ours: left alone


@needs_faiss
def test_a_query_never_writes_through_planted_links(plain: QRAGRetriever, tmp_path: Path, victim: Path) -> None:
    """The campaign's folder: manifest.json.tmp and faiss-flat.index.tmp linked to files elsewhere;
    the first FAISS search of the index saved the FAISS file and the manifest through them."""
    idx = tmp_path / "idx"
    build(plain, idx)
    other = tmp_path / "other.bin"
    other.write_bytes(b"another file")
    (idx / "manifest.json.tmp").symlink_to(victim)
    (idx / "faiss-flat.index.tmp").symlink_to(other)
    found = CorpusIndex.open(plain, idx, settings(search="flat")).retrieve("Where is Anne?", steps=2)
    assert len(found.picks) == 2
    assert victim.read_text() == "the user's file\n" and other.read_bytes() == b"another file"
    assert manifest(idx)["faiss"]["flat"]["kind"] == "flat" and (idx / "faiss-flat.index").is_file()


def test_a_resumed_build_never_writes_through_planted_links(plain: QRAGRetriever, tmp_path: Path, victim) -> None:
    idx = tmp_path / "idx"

    def stop(k: int) -> None:
        raise KeyboardInterrupt  # killed once shard 0 is on disk

    with pytest.raises(KeyboardInterrupt):
        CorpusIndex.build(plain, idx, [str(BOOK)], settings=settings(shard_size=40), progress=False, on_shard=stop)
    for what in ("emb.npy", "chunks.jsonl", "offsets.npy"):
        (idx / f"shard-00001.{what}.tmp").symlink_to(victim)
    store = build(plain, idx, shard_size=40)
    assert store.manifest["complete"] and store.n_shards == 3
    assert victim.read_text() == "the user's file\n"


# -- item 7: the manifest's run ---------------------------------------------------------------
def test_the_manifests_run_is_never_resolved(plain: QRAGRetriever, tmp_path: Path, monkeypatch) -> None:
    idx = tmp_path / "idx"
    build(plain, idx)
    m = manifest(idx)
    monkeypatch.setenv("QRAG_SECRET", "sk-secret")
    m["run"] = f"{tmp_path}/${{oc.env:QRAG_SECRET}}"
    save_manifest(idx, m)
    cfg = OmegaConf.create({"run": "???", "index": str(idx)})
    with pytest.raises(IndexStoreError) as e:
        fill_run_from_index(cfg)
    assert str(e.value) == (
        f"index={idx}: its manifest names no plain run folder ('{tmp_path}/${{oc.env:QRAG_SECRET}}'); "
        "pass run=<the run folder>"
    )
    assert "sk-secret" not in str(e.value)


# -- item 3: JSON corpora ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("hotpot.json", '[{"title": "A", "text": "one"}, {"title": "B", "text": "two"}]'),
        ("pretty.json.txt", '[\n  {"text": "one"}\n]\n'),
        ("records.txt", '\n{"text": "one"}\n{"text": "two"}\n'),
        ("strings.md", '["one", "two"]'),
    ],
)
def test_a_json_corpus_is_refused(tmp_path: Path, name: str, body: str) -> None:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    with pytest.raises(CorpusError) as e:
        list(iter_chunks(resolve_files(str(path)), "sentences", " "))
    assert str(e.value) == (
        f"{path}: JSON, which would be indexed as plain text: a corpus of records is one object per line in "
        "a .jsonl file: rename a file of such lines to .jsonl, or convert a JSON array, e.g. "
        "jq -c '.[]' in.json > in.jsonl"
    )


def test_ndjson_is_json_lines_and_brackets_in_text_are_text(tmp_path: Path) -> None:
    nd = tmp_path / "passages.ndjson"
    nd.write_text('{"text": "one", "id": 1}\n{"text": "two", "id": 2}\n', encoding="utf-8")
    assert [(c.text, c.id) for c in iter_chunks([nd], "sentences", None)] == [("one", 1), ("two", 2)]
    book = tmp_path / "book.txt"
    book.write_text("[Chapter 1]\nAnne went home.\n", encoding="utf-8")
    assert [c.text for c in iter_chunks([book], "lines", None)] == ["[Chapter 1]", "Anne went home."]


# -- item 4: write failures and read-only indexes ---------------------------------------------
def test_a_full_disk_while_indexing_is_one_line_and_the_rerun_finishes(
    plain: QRAGRetriever, tmp_path: Path, monkeypatch
) -> None:
    idx = tmp_path / "idx"
    seen = []

    def opener(path):
        seen.append(path.name)
        return FullAfter(path, 100) if path.name.startswith(".shard-00001.emb.npy") else open(path, "wb")

    monkeypatch.setattr(storage, "_open_for_write", opener)
    with pytest.raises(DiskFullError) as e:
        build(plain, idx, shard_size=40)
    assert str(e.value).startswith(f"disk full while writing {idx}/shard-00001.emb.npy (")
    assert str(e.value).endswith("MiB free). Free space on that disk, then rerun the same command")
    assert not [p.name for p in idx.iterdir() if ".tmp" in p.name]
    monkeypatch.undo()
    store = build(plain, idx, shard_size=40)
    assert store.manifest["complete"] and store.n_chunks == 82


def test_an_unwritable_index_parent_is_one_line(plain: QRAGRetriever, tmp_path: Path, monkeypatch) -> None:
    def refuse(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)  # (the tests run as root: chmod would not stop them)
    with pytest.raises(NotWritableError) as e:
        build(plain, tmp_path / "shared" / "idx")
    assert str(e.value) == (
        f"cannot write {tmp_path}/shared/idx (permission denied); make {tmp_path}/shared writable "
        f"(e.g. chmod u+w {tmp_path}/shared), then rerun the same command"
    )


@needs_faiss
def test_a_read_only_index_is_searched_in_memory(plain: QRAGRetriever, tmp_path: Path, monkeypatch, capsys) -> None:
    idx = tmp_path / "idx"
    build(plain, idx)
    before = sorted(p.name for p in idx.iterdir())

    def read_only(path):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(storage, "_open_for_write", read_only)
    index = CorpusIndex.open(plain, idx, settings(search="flat"))
    assert "FAISS flat" in index.describe() and len(index.retrieve("Where is Anne?", steps=2).picks) == 2
    err = capsys.readouterr().err
    assert f"[index] warning: cannot write {idx}/faiss-flat.index (read-only file system);" in err
    assert "; the FAISS flat index is searched in memory, not saved" in err
    assert sorted(p.name for p in idx.iterdir()) == before


# -- item 5: damaged folders ------------------------------------------------------------------
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _fewer_rows(path: Path) -> None:
    np.save(path, np.load(path)[:-1])


def _nan(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-4:] = np.float32("nan").tobytes()  # same size: only the checksum tells
    path.write_bytes(bytes(data))


def _torn_line(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[5] = ord("}")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("file", "damage", "why"),
    [
        ("shard-00001.offsets.npy", Path.unlink, "shard-00001.offsets.npy is missing"),
        ("shard-00001.emb.npy", _truncate, "shard-00001.emb.npy has "),
        ("shard-00001.emb.npy", _fewer_rows, "shard-00001.emb.npy has "),
        ("shard-00001.emb.npy", _nan, "shard-00001.emb.npy changed since it was written (sha256 differs)"),
        ("shard-00001.chunks.jsonl", _torn_line, "shard-00001.chunks.jsonl changed since it was written"),
    ],
)
def test_a_damaged_shard_is_named(plain: QRAGRetriever, tmp_path: Path, file, damage, why) -> None:
    idx = tmp_path / "idx"
    build(plain, idx, shard_size=40)
    damage(idx / file)
    with pytest.raises(IndexStoreError) as e:
        index = CorpusIndex.open(plain, idx, settings(search="exact"))
        index.retrieve("Where is Anne?", steps=2)
    assert str(e.value).startswith(f"index={idx}: shard 1 is missing or damaged ({why}")
    assert str(e.value).endswith("); rebuild the index")


def test_shapes_are_checked_without_checksums(plain: QRAGRetriever, tmp_path: Path) -> None:
    """An index of a version before checksums (or a manifest stripped of them): the shapes still."""
    idx = tmp_path / "idx"
    build(plain, idx, shard_size=40)
    m = manifest(idx)
    for shard in m["shards"]:
        del shard["files"]
    save_manifest(idx, m)
    _fewer_rows(idx / "shard-00001.emb.npy")
    with pytest.raises(IndexStoreError, match=r"shard 1 is missing or damaged \(embeddings float32\[39, 384\], "):
        CorpusIndex.open(plain, idx, settings(search="exact"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(n_chunks=10_000), "'n_chunks' or 'tokens' is not the sum of the shards'"),
        (lambda m: m.update(shards={"a": 1}), "'shards' is not a list of shards with counts 'n' and 'tokens'"),
        (lambda m: m["shards"][0].update(n="40"), "'shards' is not a list of shards"),
        (lambda m: m["shards"][0].update(files={"emb.npy": 3}), "a shard's 'files' is not a list of sizes"),
        (lambda m: m.pop("encoder"), "'encoder' holds no dimension 'dim'"),
        (lambda m: m.pop("complete"), "'complete' or 'shard_size' is missing"),
    ],
)
def test_an_altered_manifest_is_one_line(plain: QRAGRetriever, tmp_path: Path, change, message) -> None:
    idx = tmp_path / "idx"
    build(plain, idx, shard_size=40)
    m = manifest(idx)
    change(m)
    save_manifest(idx, m)
    with pytest.raises(IndexStoreError) as e:
        CorpusIndex.open(plain, idx, settings(search="exact"))
    assert str(e.value).startswith(f"{idx}/manifest.json: {message}")


@needs_faiss
def test_a_truncated_faiss_file_is_built_again(plain: QRAGRetriever, tmp_path: Path, capsys) -> None:
    idx = tmp_path / "idx"
    build(plain, idx)
    CorpusIndex.open(plain, idx, settings(search="flat"))
    _truncate(idx / "faiss-flat.index")
    index = CorpusIndex.open(plain, idx, settings(search="flat"))
    assert len(index.retrieve("Where is Anne?", steps=2).picks) == 2
    assert f"[index] warning: {idx}/faiss-flat.index is damaged (" in capsys.readouterr().err


# -- item 6 -----------------------------------------------------------------------------------
@needs_faiss
def test_more_ivf_lists_than_chunks_is_one_line(plain: QRAGRetriever, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    build(plain, idx)
    with pytest.raises(IndexStoreError) as e:
        CorpusIndex.open(plain, idx, settings(search="ivf", ivf_nlist=100))
    assert str(e.value) == (
        "corpus_index.ivf_nlist=100: more inverted lists than the 82 chunks to train them on; FAISS wants "
        "39 chunks per list (at most 2 here): lower it, or leave it null"
    )


# -- item 13 (issue 47 item 9): refused builds, kills, duplicates and messages ----------------
def test_a_refused_build_leaves_nothing_that_blocks_the_corrected_one(plain: QRAGRetriever, tmp_path: Path) -> None:
    titled = tmp_path / "titled.jsonl"
    titled.write_text('{"text": "Anne went home.", "title": "Anne"}\n', encoding="utf-8")
    idx = tmp_path / "idx"
    with pytest.raises(CorpusError, match="the record has a title and the run's loader has no title rule"):
        build(plain, idx, [titled], title_sep=None)
    assert not idx.exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(IndexStoreError, match="holds no chunk"):
        build(plain, idx, [empty])
    assert not idx.exists()
    assert build(plain, idx, [titled], title_sep=" ").manifest["complete"]


def test_a_kill_before_the_first_manifest_does_not_block_the_rerun(plain: QRAGRetriever, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / ".manifest.json.tmp4242").write_text('{"form')  # what the kill left
    assert build(plain, idx).manifest["complete"]


def test_a_file_named_twice_is_indexed_once(plain: QRAGRetriever, tmp_path: Path) -> None:
    store = build(plain, tmp_path / "idx", [BOOK, BOOK.parent / ("*" + BOOK.name[1:])])
    assert store.n_chunks == 82 and len(store.manifest["corpus"]) == 1


def test_records_appended_during_a_build_are_refused(plain: QRAGRetriever, tmp_path: Path) -> None:
    corpus = tmp_path / "grows.txt"
    corpus.write_text(BOOK.read_text(encoding="utf-8-sig"), encoding="utf-8")

    def append(k: int) -> None:
        with open(corpus, "a", encoding="utf-8") as f:
            f.write("A sentence written meanwhile.\n")

    with pytest.raises(IndexStoreError, match="grows.txt: changed while it was being indexed"):
        CorpusIndex.build(plain, tmp_path / "idx", [str(corpus)], settings=settings(shard_size=40), on_shard=append)
    assert not manifest(tmp_path / "idx")["complete"]


def test_corpus_messages_name_what_is_wrong(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"line one\n" * 3000 + "Ren\u00e9e went home.\n".encode("latin-1"))
    with pytest.raises(CorpusError) as e:
        list(iter_chunks([latin1], "lines", None))
    assert str(e.value) == f"{latin1}:3001: not UTF-8 text; convert the file to UTF-8"
    with pytest.raises(CorpusError) as e:
        resolve_files(str(tmp_path))
    assert str(e.value) == f"corpus={tmp_path}: a folder; name its files, e.g. corpus='{tmp_path}/*.jsonl'"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(CorpusError, match=r"fifo: not a regular file \(a pipe or a device\)"):
        resolve_files(str(fifo))


def test_a_missing_index_without_run_says_so(tmp_path: Path) -> None:
    cfg = OmegaConf.create({"run": "???", "index": str(tmp_path / "nowhere"), "corpus": None})
    with pytest.raises(IndexStoreError) as e:
        fill_run_from_index(cfg)
    assert str(e.value) == (
        f"index={tmp_path}/nowhere: no such folder (build an index there with run=<run> corpus=<files>)"
    )
    cfg.corpus = "passages.jsonl"  # a new build: run= is what is missing, said by eval_config
    fill_run_from_index(cfg)
    assert OmegaConf.is_missing(cfg, "run")


# -- issue 47 item 8: library log lines -------------------------------------------------------
@needs_faiss
def test_library_log_lines_are_not_tagged_hydra(none_run: Path, plain: QRAGRetriever, tmp_path: Path) -> None:
    """FAISS's loader reported each instruction set it tried ("Could not load library with AVX2
    support ...") at INFO, and Hydra's root handler printed it on stdout as ``[HYDRA]``."""
    from tests.tool.test_cli_export import cli

    idx = tmp_path / "idx"
    build(plain, idx)
    done = cli(f"index={idx}", "question=Where is Anne?", "steps=1", "corpus_index.search=flat")
    assert done.returncode == 0, done.stderr
    assert "[HYDRA]" not in done.stdout + done.stderr
    assert "faiss" not in done.stdout.lower() and "Could not load library" not in done.stderr
    assert done.stdout.startswith("question: Where is Anne?")
