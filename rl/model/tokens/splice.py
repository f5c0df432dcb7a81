"""The states and actions spliced from a sample's token ids (DESIGN §2.6).

Chunks are tokenised once per sample (content ids without special tokens, cut at the largest cap
any phase needs, rl/model/tokens/tokenize.py) and every state is spliced from those cached segments:
``[CLS] q [SEP] c1 [SEP] … cm [SEP]``, never by joining and re-splitting text (DESIGN §11 #20).
"""

from __future__ import annotations

from collections.abc import Sequence

from rl.model.tokens.layout import TokenLayout
from rl.model.tokens.tokenize import SampleTokens


def state_ids(
    tokens: SampleTokens, selected: Sequence[int], layout: TokenLayout, memory_content: int
) -> tuple[list[int], bool]:
    """Splice ``[CLS] q [SEP] c_j1 [SEP] …`` and apply the whole-state cap.

    Returns (ids, truncated). Over the cap, the first cap−1 tokens are kept and the separator
    appended (DESIGN §2.6).
    """
    ids: list[int] = [] if layout.bos is None else [layout.bos]
    ids += tokens.question[:memory_content]
    ids.append(layout.sep)
    for j in selected:
        ids += tokens.chunks[j][:memory_content]
        ids.append(layout.sep)
    if len(ids) > layout.state_cap:
        return ids[: layout.state_cap - 1] + [layout.sep], True
    return ids, False


def action_ids(tokens: SampleTokens, j: int, layout: TokenLayout) -> list[int]:
    body = tokens.action_chunks[j][: layout.action_content]
    return ([] if layout.bos is None else [layout.bos]) + body + [layout.sep]
