"""Shared-Neuron MLP: one small network applied to every neuron's own last 4 frames.

Each neuron's 4 input frames go through the same MLP (4 -> 64 -> 32, BatchNorm, ReLU,
dropout 0.1), which outputs that neuron's next 32 frames. Weights are shared by every
neuron, so the model is tiny and does not depend on how many neurons there are.
"""

import flax.linen as nn
import jax.numpy as jnp

BASE_SEED = 0
BATCH_SIZE = 32


class SharedNeuronMLP(nn.Module):
    hidden: int = 64
    horizon: int = 32
    dropout: float = 0.1

    @nn.compact
    def __call__(self, x, training=False):
        h = jnp.swapaxes(x, 1, 2)  # (batch, neurons, 4): each neuron is one sample of the MLP
        h = nn.Dense(self.hidden)(h)
        h = nn.BatchNorm(use_running_average=not training)(h)
        h = nn.relu(h)
        h = nn.Dropout(self.dropout, deterministic=not training)(h)
        h = nn.Dense(self.horizon)(h)
        return jnp.swapaxes(h, 1, 2)  # (batch, 32, neurons)


def _define_hyperparameters():
    return {"learning_rate": 1e-3, "hidden": 64}


def create_network(hparams):
    return SharedNeuronMLP(hidden=hparams["hidden"])
