"""Small Flax policies for test_sokoban_scoring, in a module of their own: a class needs Flax when it
is defined, and that test module imports this one only when a test uses them (lazy_modules.py)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class Recurrent(nn.Module):
    """A recurrent policy whose state is a pytree (two arrays of different shapes)."""

    resets: bool = True  # False: it never forgets by itself, whatever `done` says

    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        batch = obs.shape[0]
        if rnn_state is None:
            rnn_state = {"h": jnp.zeros((batch, 8)), "count": jnp.zeros((batch, 2, 2))}
        keep = jnp.logical_not(done) if self.resets else jnp.ones_like(done)
        h = jnp.where(keep[:, None], rnn_state["h"], 0.0)
        x = nn.Dense(8)(obs.reshape((batch, -1)))
        h = jnp.tanh(x + nn.Dense(8)(h))
        count = jnp.where(keep[:, None, None], rnn_state["count"], 0.0) + 1.0
        logits = nn.Dense(4)(h) + count[:, :1, 0]
        return logits, nn.Dense(1)(h)[:, 0], {"h": h, "count": count}


class Stateless(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        x = nn.relu(nn.Dense(16)(obs.reshape((obs.shape[0], -1))))
        return nn.Dense(4)(x), nn.Dense(1)(x)[:, 0]


class Sharp(nn.Module):
    """Recurrent, with one logit so far above the others that sampling always picks it."""

    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        logits, value, state = Recurrent(resets=False)(obs, done, rnn_state)
        return 1e4 * jax.nn.one_hot(jnp.argmax(logits, axis=-1), 4), value, state
