"""A worked example of bringing your own model: a one-layer attention-only transformer in
TransformerLens naming that answers the first token of its input, and the task's reference.

    python3 docs/examples/first_token.py first.safetensors     # writes the state dict
    verify import first.safetensors -o first.npz --vocab a,b,c,d
    verify run --model first.npz --task reference --reference docs/examples/first_token.py:first \
        --vocab a,b,c,d --N 5 --p 10

The residual stream is (token one-hot: 4 | is position 0 | constant 1 | copied token: 4).  The
head's query reads the constant and its key the position-0 flag, so every position attends to
position 0 with logit BETA; its value copies the token one-hot into the last block, which the
unembedding reads.  The first token wins at the last position by about 1 - 2 n e^-BETA.
"""

from __future__ import annotations

import sys

import numpy as np

BETA = 8.0
V, n_ctx = 4, 5
TOKEN, FLAG, ONE, COPY = slice(0, 4), 4, 5, slice(6, 10)
d = 10


def first(tokens: list[str]) -> str:
    """The reference: the answer is the input's first token."""
    return tokens[0]


def state_dict() -> dict[str, np.ndarray]:
    W_E = np.zeros((V, d))
    W_E[:, TOKEN] = np.eye(V)
    W_E[:, ONE] = 1.0
    W_pos = np.zeros((n_ctx, d))
    W_pos[0, FLAG] = 1.0
    W_Q, W_K, W_V = (np.zeros((1, d, V)) for _ in range(3))
    W_Q[0, ONE, 0] = BETA * np.sqrt(V)  # TransformerLens divides scores by sqrt(d_head)
    W_K[0, FLAG, 0] = 1.0
    W_V[0, TOKEN, :] = np.eye(V)
    W_O = np.zeros((1, V, d))
    W_O[0, :, COPY] = np.eye(V)
    W_U = np.zeros((d, V))
    W_U[COPY, :] = np.eye(V)
    return {"embed.W_E": W_E, "pos_embed.W_pos": W_pos, "blocks.0.attn.W_Q": W_Q, "blocks.0.attn.W_K": W_K,
            "blocks.0.attn.W_V": W_V, "blocks.0.attn.W_O": W_O, "unembed.W_U": W_U}


if __name__ == "__main__":
    from verifier.importers.safetensors import write_safetensors
    from verifier.support.errors import InputError
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} FILE.safetensors", file=sys.stderr)
        sys.exit(2)
    try:
        print(f"wrote {write_safetensors(sys.argv[1], state_dict())}")
    except InputError as exc:  # an existing file, a missing directory: one line, exit 2
        print(f"{sys.argv[0]}: error: {exc}", file=sys.stderr)
        sys.exit(2)
