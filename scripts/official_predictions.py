#!/usr/bin/env python
"""A retriever log (and optionally its reader output) written in the official prediction layouts of
HotpotQA and MuSiQue, scored by ports of their official scorers beside the project's own numbers
(docs/SCORING.md, "Official prediction files").

    python scripts/official_predictions.py <retriever log .jsonl[.gz]> [--reader <reader .jsonl>]
        [--data <raw dataset file>] [--out <folder>] [--check]

HotpotQA (hotpot_evaluate_v1.py): ``hotpot_pred.json`` = {"answer": {_id: text}, "sp": {_id: [[title,
sent_id], ...]}} with every sentence of each retrieved paragraph as a supporting fact, and
``hotpot_gold.json``, the logged questions' original records as a JSON array, so that
``python hotpot_evaluate_v1.py hotpot_pred.json hotpot_gold.json`` runs. MuSiQue (evaluate_v1.0.py):
``musique_pred.jsonl``, one line per question {id, predicted_answer, predicted_support_idxs (the
retrieved paragraphs' ``idx``), predicted_answerable (always true: the retriever does not judge
answerability)}, and ``musique_gold.jsonl`` in the same order, as the official script requires.
Without ``--reader`` every answer is "" (the answer metrics are then not reported).

``official_scores.json`` holds the ports' metrics, the project's (the log's paragraph-level fact
metrics, the reader's EM/F1) and how many records agree; ``--check`` exits 1 when one disagrees.
The raw records come from the log's ``.meta.json`` (data_path and split) unless ``--data`` names the
file; each retrieved paragraph's text is checked against the log's, so another file is refused.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.data.common import iter_jsonl, need, open_text, read_json_array  # noqa: E402
from envs.data.hotpotqa import HOTPOTQA_FILES, HOTPOTQA_HOW  # noqa: E402
from envs.data.ircot import is_ircot, subset_files  # noqa: E402
from envs.data.musique import MUSIQUE_FILES, MUSIQUE_HOW  # noqa: E402
from envs.errors import DatasetFormatError, DatasetNotFoundError  # noqa: E402
from prompts_and_metrics.reader_io import LogFormatError, read_jsonl  # noqa: E402
from runstore import StorageError, atomic_write_text  # noqa: E402

DATASETS = ("hotpotqa", "musique")
TOL = 1e-9


# -- ports of the official scorers (hotpotqa/hotpot hotpot_evaluate_v1.py; StonyBrookNLP/musique
# evaluate_v1.0.py with metrics/answer.py and metrics/support.py), written from their logic -------
def normalize_answer(s: str) -> str:
    """Lower case, punctuation dropped, articles a/an/the dropped, whitespace collapsed (both)."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def hotpot_answer(pred: str, gold: str) -> tuple[float, float, float, float]:
    """(em, f1, precision, recall): token F1, 0 when either side normalises to yes / no / noanswer
    and the two differ, 0 without overlap (two empty sides included)."""
    p, g = normalize_answer(pred), normalize_answer(gold)
    em = float(p == g)
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return em, 0.0, 0.0, 0.0
    p_toks, g_toks = p.split(), g.split()
    same = sum((Counter(p_toks) & Counter(g_toks)).values())
    if same == 0:
        return em, 0.0, 0.0, 0.0
    prec, rec = same / len(p_toks), same / len(g_toks)
    return em, 2 * prec * rec / (prec + rec), prec, rec


def set_scores(pred: Iterable[Any], gold: Iterable[Any]) -> tuple[float, float, float, float]:
    """HotpotQA's update_sp (MuSiQue's SupportMetric repeats it): (em, f1, precision, recall) of
    the sets; em only for the exact set. Empty sets give precision and recall 0."""
    p, g = set(pred), set(gold)
    tp, fp, fn = len(p & g), len(p - g), len(g - p)
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return float(fp + fn == 0), f1, prec, rec


def hotpot_evaluate(prediction: dict[str, Any], gold: Sequence[dict[str, Any]]) -> dict[str, float]:
    """hotpot_evaluate_v1.eval's metrics: sums over the gold records divided by their number; a
    record missing from ``answer`` or ``sp`` adds nothing there and no joint metrics."""
    keys = ("em", "f1", "prec", "recall")
    m = {f"{pre}{k}": 0.0 for pre in ("", "sp_", "joint_") for k in keys}
    for dp in gold:
        rid, ans, sp = dp["_id"], None, None
        if rid in prediction["answer"]:
            ans = hotpot_answer(prediction["answer"][rid], dp["answer"])
            for k, v in zip(keys, ans):
                m[k] += v
        if rid in prediction["sp"]:
            sp = set_scores(map(tuple, prediction["sp"][rid]), map(tuple, dp["supporting_facts"]))
            for k, v in zip(keys, sp):
                m[f"sp_{k}"] += v
        if ans is not None and sp is not None:
            prec, rec = ans[2] * sp[2], ans[3] * sp[3]
            m["joint_em"] += ans[0] * sp[0]
            m["joint_f1"] += 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
            m["joint_prec"] += prec
            m["joint_recall"] += rec
    return {k: v / len(gold) for k, v in m.items()}


def squad_f1(gold: str, pred: str) -> float:
    """MuSiQue's compute_f1 (SQuAD's): one side without tokens scores 1 iff both have none."""
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:
        return float(g == p)
    same = sum((Counter(g) & Counter(p)).values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def musique_answer(pred: str, golds: Sequence[str]) -> tuple[float, float]:
    """AnswerMetric of one record: (em, f1), each the maximum over the answer and its aliases."""
    em = max(float(normalize_answer(g) == normalize_answer(pred)) for g in golds)
    return em, max(squad_f1(pred, g) for g in golds)


def musique_support(pred: Iterable[int], gold: Iterable[int]) -> tuple[float, float]:
    """SupportMetric of one record: (em, f1) of the index sets, both 1 when both are empty."""
    p, g = set(map(int, pred)), set(map(int, gold))
    if not p and not g:
        return 1.0, 1.0
    em, f1, _, _ = set_scores(p, g)
    return em, f1


def musique_evaluate(pred_lines: Sequence[dict[str, Any]], gold_lines: Sequence[dict[str, Any]]) -> dict[str, float]:
    """evaluate_v1.0's answer_f1, answer_em and support_f1 over the answerable records (unrounded:
    the official script rounds to 3 decimals); the lines must pair up by position and id."""
    if len(pred_lines) != len(gold_lines):
        raise ValueError("the prediction and gold files differ in their number of lines")
    ems, f1s, sups = [], [], []
    for g, p in zip(gold_lines, pred_lines):
        if g["id"] != p["id"]:
            raise ValueError("the prediction and gold lines must be in the same order (ids differ)")
        if not g["answerable"]:
            continue
        em, f1 = musique_answer(p["predicted_answer"], [g["answer"], *g["answer_aliases"]])
        ems.append(em)
        f1s.append(f1)
        gold_idx = [para["idx"] for para in g["paragraphs"] if para["is_supporting"]]
        sups.append(musique_support(p["predicted_support_idxs"], gold_idx)[1])
    n = len(ems)
    return {
        "answer_f1": sum(f1s) / n if n else 0.0,
        "answer_em": sum(ems) / n if n else 0.0,
        "support_f1": sum(sups) / n if n else 0.0,
    }


# -- the project's files ---------------------------------------------------------------------------
def read_log(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The retriever records (``.jsonl`` or ``.jsonl.gz``) and the settings of its ``.meta.json``."""
    if not path.is_file():
        raise FileNotFoundError(f"retriever log not found: {path} (an eval_retriever.py .jsonl or .jsonl.gz)")
    records = [rec for _, rec in iter_jsonl(path)]
    for k, rec in enumerate(records, 1):
        missing = [f for f in ("id", "pred_idx", "pred_texts", "sf_idx") if f not in rec]
        if missing:
            raise LogFormatError(f"{path}:{k}: record lacks field(s) {', '.join(missing)}")
    meta_path = path.with_name(path.name.removesuffix(".gz") + ".meta.json")
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    return records, meta


def raw_files(dataset: str, meta: dict[str, Any], data: Path | None) -> list[Path]:
    """The raw dataset files the log was made from: ``--data``, else the meta's data_path and split."""
    if data is not None:
        return [data]
    if "data_path" not in meta or "split" not in meta:
        raise LogFormatError("the log has no .meta.json naming its data: pass the raw dataset file with --data")
    folder = Path(meta["data_path"])
    folder = folder if folder.is_absolute() or folder.exists() else ROOT / folder
    official, how = (HOTPOTQA_FILES, HOTPOTQA_HOW) if dataset == "hotpotqa" else (MUSIQUE_FILES, MUSIQUE_HOW)
    files = subset_files(folder, meta["split"], official, f"{dataset} records", how)
    if files is None:
        files = [folder / name for name in official.get(meta["split"], [])]
    return files


def read_raw(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Records of JSON arrays (HotpotQA's official files) or JSONL files (the subsets, MuSiQue)."""
    out: list[dict[str, Any]] = []
    for p in paths:
        if not p.is_file() and p.with_name(p.name + ".gz").is_file():
            p = p.with_name(p.name + ".gz")
        if not p.is_file():
            raise DatasetNotFoundError(p, "the raw dataset file the retriever log was made from", "pass it with --data")
        with open_text(p) as f:
            array = f.read(1).lstrip() == "["
        out.extend(read_json_array(p) if array else [rec for _, rec in iter_jsonl(p)])
    return out


def chunk_text(dataset: str, para: Any) -> str:
    """The chunk the loaders make of a paragraph (envs/data/hotpotqa.py, musique.py)."""
    if dataset == "hotpotqa":
        return para[0] + " " + " ".join(para[1])
    return para["title"] + ". " + para["paragraph_text"]


def match_raw(dataset: str, records: Sequence[dict[str, Any]], raw: Sequence[dict[str, Any]], where: str):
    """The raw record of each log record, by id (MuSiQue-Full: an ``:unanswerable`` id names the
    unanswerable twin); its paragraphs must hold the texts the log retrieved."""
    if any(is_ircot(r) for r in raw):
        raise DatasetFormatError(
            where,
            None,
            "IRCoT-layout records hold no sentence ids or paragraph idx: official predictions need the original layout",
        )
    key = "_id" if dataset == "hotpotqa" else "id"
    by_id = {
        (str(need(r, key, (str, int), where, f"record {i}")), r.get("answerable", True)): r for i, r in enumerate(raw)
    }
    out = []
    for rec in records:
        rid = str(rec["id"])
        found = by_id.get((rid.removesuffix(":unanswerable"), not rid.endswith(":unanswerable")))
        if found is None:
            raise DatasetFormatError(where, None, f"no record with id {rid!r}: is this the data the log was made from?")
        paras = found["context"] if dataset == "hotpotqa" else found["paragraphs"]
        for j, text in zip(rec["pred_idx"], rec["pred_texts"]):
            if not 0 <= j < len(paras) or chunk_text(dataset, paras[j]) != text:
                raise DatasetFormatError(
                    where,
                    None,
                    f"id {rid!r}: paragraph {j} is not the text the log "
                    "retrieved: is this the data the log was made from?",
                )
        out.append(found)
    return out


def reader_answers(path: Path | None) -> dict[str, dict[str, Any]]:
    """The reader's output lines (eval_llm_openqa.py) by record id; {} without a reader."""
    if path is None:
        return {}
    return {str(line["id"]): line for line in read_jsonl(path, ("id", "prediction", "EM", "F1"))}


# -- writing and comparing -------------------------------------------------------------------------
def hotpot_files(records, raws, answers) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(prediction, gold) in hotpot_evaluate_v1.py's layouts."""
    pred: dict[str, Any] = {"answer": {}, "sp": {}}
    for rec, raw in zip(records, raws):
        rid = raw["_id"]
        pred["answer"][rid] = answers[str(rec["id"])]["prediction"] if answers else ""
        pred["sp"][rid] = [[raw["context"][j][0], i] for j in rec["pred_idx"] for i in range(len(raw["context"][j][1]))]
    return pred, list(raws)


def musique_files(records, raws, answers) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(prediction lines, gold lines) in evaluate_v1.0.py's layouts, in the log's order."""
    pred = [
        {
            "id": raw["id"],
            "predicted_answer": answers[str(rec["id"])]["prediction"] if answers else "",
            "predicted_support_idxs": [raw["paragraphs"][j]["idx"] for j in rec["pred_idx"]],
            "predicted_answerable": True,
        }
        for rec, raw in zip(records, raws)
    ]
    return pred, list(raws)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL


def fact_agreement(dataset: str, rec: dict[str, Any], raw: dict[str, Any]) -> tuple[bool, bool | None]:
    """Whether a record's fact precision / recall / F1 equal the port's (the project's are
    paragraph-level: HotpotQA's update_sp over the paragraphs' titles, MuSiQue's support F1 over
    paragraph idx), and its fact EM (None where the picks are not as many as the gold: the
    project's EM allows extra picks, the official needs the exact set)."""
    if dataset == "hotpotqa":
        titles = [raw["context"][j][0] for j in rec["pred_idx"]]
        em, f1, prec, recall = set_scores(titles, (f[0] for f in raw["supporting_facts"]))
        gold_n = len({f[0] for f in raw["supporting_facts"]})
        ok = close(f1, rec["f1"]) and close(prec, rec["precision"]) and close(recall, rec["recall"])
    else:
        gold_idx = [p["idx"] for p in raw["paragraphs"] if p["is_supporting"]]
        em, f1 = musique_support([raw["paragraphs"][j]["idx"] for j in rec["pred_idx"]], gold_idx)
        gold_n = len(set(gold_idx))
        ok = close(f1, rec["f1"])
    return ok, close(em, rec["em"]) if len(set(rec["pred_idx"])) == gold_n else None


def agreement(dataset: str, records, raws, answers) -> dict[str, Any]:
    """Per record, the project's numbers against the ports': fact metrics (:func:`fact_agreement`)
    and the reader's EM / F1."""
    n_fact = n_fact_ok = n_em = n_em_ok = n_ans = n_ans_ok = 0
    for rec, raw in zip(records, raws):
        if not raw.get("answerable", True):
            continue  # MuSiQue-Full's unanswerable twin: the official scores neither its answer nor support
        if rec.get("f1") is not None:  # None: gold unknown to the project (none in the context)
            ok, em_ok = fact_agreement(dataset, rec, raw)
            n_fact += 1
            n_fact_ok += ok
            if em_ok is not None:
                n_em += 1
                n_em_ok += em_ok
        line = answers.get(str(rec["id"]))
        if line is not None:
            if dataset == "hotpotqa":
                a_em, a_f1 = hotpot_answer(line["prediction"], raw["answer"])[:2]
            else:
                a_em, a_f1 = musique_answer(line["prediction"], [raw["answer"], *raw["answer_aliases"]])
            n_ans += 1
            n_ans_ok += close(a_em, line["EM"]) and close(a_f1, line["F1"])
    return {
        "fact_f1_agree": f"{n_fact_ok}/{n_fact}",
        "fact_em_agree": f"{n_em_ok}/{n_em} (records with as many picks as gold paragraphs)",
        "answer_agree": f"{n_ans_ok}/{n_ans}",
        "all_agree": n_fact_ok == n_fact and n_em_ok == n_em and n_ans_ok == n_ans,
    }


def write_official(log: Path, out: Path, reader: Path | None = None, data: Path | None = None) -> dict[str, Any]:
    """Write the official files of ``log`` under ``out``; return official_scores.json's content."""
    records, meta = read_log(log)
    dataset = str(meta.get("dataset", ""))
    if dataset not in DATASETS:
        raise LogFormatError(
            f"{log}: official layouts exist for {', '.join(DATASETS)}; the log's dataset is "
            f"{dataset or 'not named (no .meta.json)'}"
        )
    files = raw_files(dataset, meta, data)
    raws = match_raw(dataset, records, read_raw(files), str(files[0]))
    answers = reader_answers(reader)
    missing = [str(r["id"]) for r in records if answers and str(r["id"]) not in answers]
    if missing:
        raise LogFormatError(f"{reader}: no reader line for {len(missing)} record(s) of the log, e.g. {missing[0]!r}")
    out.mkdir(parents=True, exist_ok=True)
    scored = [r for r in records if not str(r["id"]).endswith(":unanswerable")]
    known = [r for r in scored if r.get("f1") is not None]  # as the evaluation's summary
    project = {"fact_em": mean(r["em"] for r in known), "fact_f1": mean(r["f1"] for r in known)}
    if answers:
        project.update(
            answer_em=mean(answers[str(r["id"])]["EM"] for r in scored),
            answer_f1=mean(answers[str(r["id"])]["F1"] for r in scored),
        )
    if dataset == "hotpotqa":
        pred, gold = hotpot_files(records, raws, answers)
        atomic_write_text(out / "hotpot_pred.json", json.dumps(pred, ensure_ascii=False))
        atomic_write_text(out / "hotpot_gold.json", json.dumps(gold, ensure_ascii=False))
        official = hotpot_evaluate(pred, gold)
    else:
        pred, gold = musique_files(records, raws, answers)
        atomic_write_text(out / "musique_pred.jsonl", "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pred))
        atomic_write_text(out / "musique_gold.jsonl", "".join(json.dumps(g, ensure_ascii=False) + "\n" for g in gold))
        official = musique_evaluate(pred, gold)
    if not answers:  # "" answers score 0: not a measurement
        official = {k: v for k, v in official.items() if k.startswith(("sp_", "support_"))}
    result = {
        "log": str(log),
        "dataset": dataset,
        "n": len(records),
        "official": official,
        "project": project,
        **agreement(dataset, records, raws, answers),
    }
    atomic_write_text(out / "official_scores.json", json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="eval_retriever.py records (.jsonl or .jsonl.gz) of HotpotQA or MuSiQue")
    ap.add_argument("--reader", type=Path, help="eval_llm_openqa.py output for this log (answers)")
    ap.add_argument("--data", type=Path, help="the raw dataset file (default: the log's .meta.json data_path/split)")
    ap.add_argument("--out", type=Path, help="output folder (default: <log stem>_official next to the log)")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the project's numbers agree with the ports")
    args = ap.parse_args(argv)
    out = args.out or args.log.with_name(args.log.name.split(".jsonl")[0] + "_official")
    try:
        result = write_official(args.log, out, args.reader, args.data)
    except (OSError, ValueError, StorageError) as e:  # missing files, bad records, a full disk
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    if args.check and not result["all_agree"]:
        print("error: the project's numbers and the official scorers' disagree (official_scores.json)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
