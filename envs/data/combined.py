"""Combined multi-hop sets (DESIGN §7.10): HotpotQA + MuSiQue (+ 2WikiMultihopQA).

A concatenation dataset1 (HotpotQA) + dataset2 (MuSiQue) [+ dataset3 (2WikiMultihopQA)];
each sample carries ``source`` = the dataset it came from and is converted by that source's
rules. With ``shuffle`` (per split: train true, test false as in the ref) the concatenated
index is permuted once by a generator derived from the run seed (ref: fixed 42, DESIGN §11 #34);
``length`` then keeps the first items. When every part's folder holds a validation file of its own
(the shipped real subsets), the ``validation`` split is their concatenation (CombinedSpec).
"""

from __future__ import annotations

from typing import Any

from envs.data.common import ListDataset, cap, cfg_get, split_length
from envs.data.hotpotqa import load_2wiki, load_hotpotqa
from envs.data.ircot import SubsetSpec
from envs.data.musique import load_musique
from envs.data.registry import register
from envs.seeding import derive_rng
from envs.types import Sample


def _tag(samples: list[Sample], source: str) -> list[Sample]:
    for s in samples:
        s["source"] = source
    return samples


def load_combined(envs_cfg: Any, split: str) -> list[Sample]:
    """Concatenation in dataset order for ``split`` (``train``, ``validation`` or a test split such
    as ``eval``)."""
    test_split = str(cfg_get(envs_cfg, "test_split"))
    part = test_split if split == "test" else split
    samples = _tag(load_hotpotqa(cfg_get(envs_cfg, "dataset1_path"), part), "hotpotqa")
    samples += _tag(load_musique(cfg_get(envs_cfg, "dataset2_path"), part), "musique")
    third = cfg_get(envs_cfg, "dataset3_path")
    if third:
        # 2Wiki has train/dev/test; its held-out split is ``dataset3_test_split`` (default dev)
        wiki_split = part if part in ("train", "validation") else str(cfg_get(envs_cfg, "dataset3_test_split"))
        samples += _tag(load_2wiki(third, wiki_split), "2WikiMultihopQA")
    return samples


class CombinedSpec(SubsetSpec):
    path_keys = ("dataset1_path", "dataset2_path", "dataset3_path")


@register("combined", CombinedSpec())
def build_combined(envs_cfg: Any, split: str, seed: int) -> ListDataset:
    """Reads ``dataset1_path``, ``dataset2_path``, ``dataset3_path`` (null: two sets),
    ``test_split``, ``dataset3_test_split``, ``shuffle`` ({train, test} or one bool) and ``length``
    (defaults: configs/envs/hotpotqa+musique*.yaml)."""
    samples = load_combined(envs_cfg, split)
    shuffle = cfg_get(envs_cfg, "shuffle")
    kind = "train" if split == "train" else "test"
    do_shuffle = shuffle if isinstance(shuffle, bool) else bool(shuffle[kind])
    if do_shuffle:
        perm = derive_rng(int(seed), "combined-shuffle", split).permutation(len(samples))
        samples = [samples[int(i)] for i in perm]
    return ListDataset(cap(samples, split_length(envs_cfg, split)), f"combined/{split}")
