"""Write the generated data sets (not the real data), in the real files' formats:

    python scripts/generate_data.py babi --out data/babilong/babi-generated/en-10k --seed 0 --gzip
    python scripts/generate_data.py multihop --out /tmp/gen --gzip      # the shipped sizes (data/*-generated)
    python scripts/generate_data.py multihop --out ../datasets --hotpotqa 20000:2000 --musique 10000:1000

``babi``: seeded bAbI v1.2-format task files for qa1-qa5. The first command (the default --out)
writes the shipped data/babilong/babi-generated/en-10k byte for byte. The generator follows rules
measured on the real files (docs/DATA_BABILONG.md; compare with experiments/babi_fidelity/babi_fidelity.py).
Files are named like the real en-10k ones ({task}_{split}.txt); with --gzip they are written as
{task}_{split}.txt.gz (deterministic bytes), which the loader reads. Every file is re-checked by an
independent simulation (envs.data.babi_generator.check_babi_lines) before it is written.

``multihop``: the synthetic multi-hop sets (envs/data/multihop_generator.py). Writes (under --out,
the ``paths.data_root`` layout):
  hotpotqa/hotpot_train_v1.1.json, hotpotqa/hotpot_dev_distractor_v1.json
  musique/musique_ans_v1.0_train.jsonl, musique/musique_ans_v1.0_dev.jsonl
  2wikimultihopqa/{train,dev,test}.json
  ruler_qa/qa_2.jsonl   (RULER QA format from the HotpotQA dev questions, with gold_docs)
With --gzip and the default sizes these are the shipped data/*-generated files and
data/ruler_qa/qa_2.jsonl.gz, byte for byte.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

from envs.data.babi_generator import GEN_TASKS, check_babi_lines, generate_task
from envs.data.multihop_generator import dumps_json_array, make_2wiki, make_hotpotqa, make_musique, make_ruler_qa
from envs.data.niah_generator import write_jsonl, write_text

REPO = Path(__file__).resolve().parents[1]


def babi(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    for key in args.tasks:
        for split, n in (("train", args.train_questions), ("test", args.test_questions)):
            lines = generate_task(key, n, args.seed, split)
            assert check_babi_lines(key, lines) == n
            text = "".join(line + "\n" for line in lines).encode("utf-8")
            path = args.out / f"{GEN_TASKS[key]}_{split}.txt"
            if args.gzip:
                path = path.with_name(path.name + ".gz")
                path.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
            else:
                path.write_bytes(text)
            print(f"{path}: {n} questions, {len(lines)} lines")


def _sizes(spec: str, n: int) -> list[int]:
    parts = [int(x) for x in spec.split(":")]
    if len(parts) != n:
        raise SystemExit(f"expected {n} sizes separated by ':', got {spec!r}")
    return parts


def multihop(args: argparse.Namespace) -> None:
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


def main(argv: list[str] | None = None) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    sub = ap.add_subparsers(dest="data", required=True, metavar="babi|multihop")

    b = sub.add_parser("babi", help="bAbI qa1-qa5 task files", description=__doc__, formatter_class=raw)
    b.add_argument("--out", type=Path, default=REPO / "data/babilong/babi-generated/en-10k")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--tasks", nargs="+", default=list(GEN_TASKS), choices=list(GEN_TASKS))
    b.add_argument("--train-questions", type=int, default=10_000)
    b.add_argument("--test-questions", type=int, default=1_000)
    b.add_argument("--gzip", action="store_true", help="write .txt.gz (deterministic bytes)")
    b.set_defaults(run=babi)

    m = sub.add_parser("multihop", help="HotpotQA, MuSiQue, 2Wiki, RULER QA", description=__doc__, formatter_class=raw)
    m.add_argument("--out", default="data", help="data root to write into")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--hotpotqa", default="500:100", help="TRAIN:DEV sizes")
    m.add_argument("--musique", default="300:100", help="TRAIN:DEV sizes")
    m.add_argument("--twowiki", default="100:50:50", help="TRAIN:DEV:TEST sizes")
    m.add_argument("--ruler-qa", type=int, default=50, help="RULER QA records (from HotpotQA dev)")
    m.add_argument("--gzip", action="store_true", help="write .gz files (the loaders read both)")
    m.set_defaults(run=multihop)

    args = ap.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
