"""Runs whose loss moves without harm: reinforcement learning and GANs.

The loss of a policy or value function follows the data the policy collects: when the policy
finds new reward, the value targets move and the loss rises or jumps while the run is doing
what it should. A GAN's generator and discriminator losses trade off. A rise or a moderate
jump of such a loss is evidence only against a reward that did not improve.
"""

from __future__ import annotations

import re

from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace, traces
from trainmedic.run.series import Run
from trainmedic.run.vocabulary import GAN_DISC_HINTS, GAN_GEN_HINTS

__all__ = ["REWARD_HINTS", "RL_LOSS_WORDS", "reward_improved", "losses_trade_off"]

#: Metric-name fragments of a reward/return (RL): a loss may rise while the policy improves.
REWARD_HINTS = ("reward", "return", "ep_rew", "episode_rew", "ep_ret")
#: Words of a loss that is a temporal-difference or policy objective (RL): its targets move
#: with the policy and the target network, so it rises and jumps while the agent learns (a
#: DQN's TD loss steps up at every target-network sync; Mnih et al. 2015).
RL_LOSS_WORDS = frozenset({"td", "q", "bellman", "critic", "actor", "policy", "value_loss",
                           "vf", "pg", "dqn"})


def reward_improved(run: Run) -> str:
    """Why the run's loss may move without harm ("" when nothing says so): a reward/return
    metric (not a reward model's loss) with >= 8 points whose last quarter's median is above
    its first quarter's."""
    for m in run.metrics():
        if not any(h in m.lower() for h in REWARD_HINTS) or "loss" in m.lower():
            continue  # (a reward model's loss is a loss, not a reward)
        t = Trace.of(run, m, None) or next(iter(traces(run, m)), None)
        if t is None or len(t) < 8:
            continue
        q = max(2, len(t) // 4)
        if median(t.values[-q:]) > median(t.values[:q]):
            return f"{m} improved over the run (RL: the loss follows the data the policy sees)"
    return ""


def losses_trade_off(run: Run) -> str:
    """Why a rising or jumping loss may be legitimate in this run ("" when nothing says so):
    both generator- and discriminator-like losses are logged (a GAN), or a reward improved."""
    # (the raw names too: the generator's loss is often the one read as "loss")
    names = [m.lower() for m in run.metrics()] + [
        str(m.get("column", "")).lower() for m in run.meta.get("mapping", ())]
    if any(h in m for m in names for h in GAN_GEN_HINTS) and \
            any(h in m for m in names for h in GAN_DISC_HINTS):
        return "generator and discriminator losses are logged (a GAN: they trade off)"
    loss_cols = [str(m.get("column", "")).lower() for m in run.meta.get("mapping", ())
                 if m.get("canonical") == "loss"]
    for col in loss_cols:
        words = set(re.split(r"[^a-z0-9]+", col))
        if words & RL_LOSS_WORDS or any(w in col for w in RL_LOSS_WORDS if "_" in w):
            return (f"the loss is '{col}', a reinforcement-learning objective (its targets "
                    f"move with the policy and the target network)")
    return reward_improved(run)
