"""Generate the synthetic multi-hop sets (envs/data/multihop_generator.py) in the real formats.

    python scripts/generate_multihop.py --out /tmp/gen --gzip      # the shipped sizes (data/*-generated)
    python scripts/generate_multihop.py --out ../datasets --hotpotqa 20000:2000 --musique 10000:1000

Writes (under --out, the ``paths.data_root`` layout):
  hotpotqa/hotpot_train_v1.1.json, hotpotqa/hotpot_dev_distractor_v1.json
  musique/musique_ans_v1.0_train.jsonl, musique/musique_ans_v1.0_dev.jsonl
  2wikimultihopqa/{train,dev,test}.json
  ruler_qa/qa_2.jsonl   (RULER QA format from the HotpotQA dev questions, with gold_docs)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from envs.data.multihop_generator import dumps_json_array, make_2wiki, make_hotpotqa, make_musique, make_ruler_qa
from envs.data.niah_generator import write_jsonl, write_text


def _sizes(spec: str, n: int) -> list[int]:
    parts = [int(x) for x in spec.split(":")]
    if len(parts) != n:
        raise SystemExit(f"expected {n} sizes separated by ':', got {spec!r}")
    return parts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data", help="data root to write into")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hotpotqa", default="500:100", help="TRAIN:DEV sizes")
    ap.add_argument("--musique", default="300:100", help="TRAIN:DEV sizes")
    ap.add_argument("--twowiki", default="100:50:50", help="TRAIN:DEV:TEST sizes")
    ap.add_argument("--ruler-qa", type=int, default=50, help="RULER QA records (from HotpotQA dev)")
    ap.add_argument("--gzip", action="store_true", help="write .gz files (the loaders read both)")
    args = ap.parse_args(argv)
    out, gz, seed = Path(args.out), ".gz" if args.gzip else "", args.seed

    def put(records, path: Path, jsonl: bool) -> None:
        p = write_jsonl(records, str(path) + gz) if jsonl else write_text(dumps_json_array(records), str(path) + gz)
        print(f"{p}: {len(records)} records")

    h_train, h_dev = _sizes(args.hotpotqa, 2)
    put(make_hotpotqa(seed, "train", h_train), out / "hotpotqa" / "hotpot_train_v1.1.json", False)
    dev = make_hotpotqa(seed, "dev", h_dev)
    put(dev, out / "hotpotqa" / "hotpot_dev_distractor_v1.json", False)
    m_train, m_dev = _sizes(args.musique, 2)
    put(make_musique(seed, "train", m_train), out / "musique" / "musique_ans_v1.0_train.jsonl", True)
    put(make_musique(seed, "dev", m_dev), out / "musique" / "musique_ans_v1.0_dev.jsonl", True)
    for split, n in zip(("train", "dev", "test"), _sizes(args.twowiki, 3)):
        put(make_2wiki(seed, split, n), out / "2wikimultihopqa" / f"{split}.json", False)
    if args.ruler_qa:
        put(make_ruler_qa(dev[: args.ruler_qa], seed), out / "ruler_qa" / "qa_2.jsonl", True)


if __name__ == "__main__":
    main()
