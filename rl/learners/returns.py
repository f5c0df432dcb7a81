"""λ-returns with soft target values (DESIGN §5.3), as one pure tensor function.

Shapes: time-major [L, E]. ``values[t]`` is V(s_t), the target value of the state the env was
in when it acted at step t; ``bootstrap`` is V(s_L) after the last step. ``dones[t] = 1`` means
the episode ended at step t (terminal or time limit: no bootstrap across it, DESIGN §1.4).

  G_{L-1} = r_{L-1} + γ(1 − d_{L-1}) V_L
  G_t     = r_t + γ(1 − d_t)[(1 − λ) V_{t+1} + λ G_{t+1}]

``legacy_off_by_one`` (DESIGN §11 #1, the reference): at t = L−2 only, V_{t+1} is replaced by
(1 − d_{L−1})·V_L.
"""

from __future__ import annotations

import torch


def lambda_returns(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    values: torch.Tensor,
    bootstrap: torch.Tensor,
    gamma: float,
    lam: float,
    legacy_off_by_one: bool = False,
) -> torch.Tensor:
    rewards, dones, values = rewards.float(), dones.float(), values.float()
    L = rewards.shape[0]
    not_done = 1.0 - dones
    returns = torch.empty_like(rewards)
    g = rewards[L - 1] + gamma * not_done[L - 1] * bootstrap
    returns[L - 1] = g
    for t in range(L - 2, -1, -1):
        v_next = values[t + 1]
        if legacy_off_by_one and t == L - 2:
            v_next = not_done[L - 1] * bootstrap
        g = rewards[t] + gamma * not_done[t] * ((1.0 - lam) * v_next + lam * g)
        returns[t] = g
    return returns
