"""Vanilla MLP: one small network applied to every position, averaged over the sequence.

Each position's one-hot nucleotide (A, T/U, C, G) goes through Dense(hidden) + ReLU + dropout,
then Dense(d_output); the outputs are averaged over the positions (padding included). It sees
no order and no neighbours, so what it can learn is a function of base composition and length.
"""

import flax.linen as nn
import jax.numpy as jnp

BASE_SEED = 0
BATCH_SIZE = 64


class VanillaMLP(nn.Module):
    hidden: int
    d_output: int
    dropout: float
    regression: bool

    @nn.compact
    def __call__(self, x, deterministic=True):
        h = nn.Dense(self.hidden)(x)  # (batch, length, hidden): the same weights at every position
        h = nn.relu(h)
        h = nn.Dropout(self.dropout, deterministic=deterministic)(h)
        h = nn.Dense(self.d_output)(h)
        out = jnp.mean(h, axis=1)  # (batch, d_output)
        return out[:, 0] if self.regression else out


def _define_hyperparameters():
    return {"learning_rate": 1e-3, "hidden_dim": 512, "dropout": 0.1}


def create_network(hparams):
    return VanillaMLP(
        hidden=hparams["hidden_dim"],
        d_output=hparams["d_output"],
        dropout=hparams["dropout"],
        regression=hparams["task_type"] == "regression",
    )
