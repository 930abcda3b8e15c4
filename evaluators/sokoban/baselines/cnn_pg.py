"""CNN + Policy Gradient: a small convolutional actor-critic, trained by the harness's default update.

Two 3x3 convolutions (32 and 64 channels) see the whole board, a dense layer of 256 units
summarises it, and two heads of 64 units give the action logits and the state value. The
update is the harness's advantage actor-critic (GAE, value loss, entropy bonus).
"""

import flax.linen as nn

BASE_SEED = 0


class ActorCritic(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        x = nn.relu(nn.Conv(32, (3, 3))(obs))
        x = nn.relu(nn.Conv(64, (3, 3))(x))
        x = nn.relu(nn.Dense(256)(x.reshape((x.shape[0], -1))))
        logits = nn.Dense(4)(nn.relu(nn.Dense(64)(x)))
        value = nn.Dense(1)(nn.relu(nn.Dense(64)(x)))[:, 0]
        return logits, value


def _define_hyperparameters():
    return {"learning_rate": 4e-4, "entropy_coef": 0.01, "value_coef": 0.5}


def create_network(hparams):
    return ActorCritic()
