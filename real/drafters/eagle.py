"""An EAGLE-style drafter: one decoder layer that predicts the target's next feature.

Notation: x_i is token i of a sequence, f_i the target's last hidden state at token i (after its
final norm: exactly what its lm_head reads, so p_target(x_{i+1}) = softmax(lm_head(f_i))).
The drafter reads (f_{i-1}, x_i), with f_{-1} = 0, and predicts f_i:

    g_i = layer(fc(concat(embed(x_i), f_{i-1})))      draft logits_i = lm_head(g_i)

`embed` and `lm_head` are the target's own modules, shared and frozen (not parameters of this
module, not in its state dict); `layer` is one decoder layer of the target's architecture with its
rotary embedding. As in EAGLE-1, g is regressed onto f directly, so no extra norm sits before the
lm_head. When drafting ahead, the drafter feeds its own g in place of the unknown f.

Loss per position = w_feat * SmoothL1(g_i, f_i) + w_tok * CE(softmax(lm_head(f_i)), lm_head(g_i)),
a soft cross-entropy against the target's distribution. With `unroll` = k > 1 (EAGLE-3's training-time
test) the forward runs k times, pass j reading the features pass j - 1 predicted (g_{i-1} for f_{i-1}),
as the drafter reads its own features j steps into a draft, and the loss is the passes' mean: the drafter
learns to draft on from its own predictions, not only from the target's. (A simple form of it: every
position of pass j reads pass j - 1's features, so its attention's earlier keys come from predicted
features too, where in a real draft those of the accepted prefix come from the target's.)

A reduced draft vocabulary (EAGLE-3): given `draft_vocab` (distinct target token ids, e.g. the most
frequent ones of the training data), the drafter's head is those rows of the target's lm_head, a
copy that is not trained (`target_updated` copies them again after the target changes), so a draft
step scores a few thousand tokens instead of the whole vocabulary; `head` gives those logits and `to_target` maps their indices back to token ids. The
loss's target distribution is then the target's renormalised over the draft vocabulary. Drafts are
proposals only: verification always uses the target's full distribution (real.engine.sampling), so the
output is exact whatever the draft vocabulary; a token outside it just never gets drafted.

Behind the drafter interface (real.drafters) it is the kind "eagle", reading the target's hidden states
(`features` "hidden"); its session (real.drafters.eagle_session.EagleSession) keeps a per-row KV cache over the committed tokens
and drafts from it: a chain where top-k is 1, else EAGLE-2's tree search (real.engine.spec.select_tree keeps the
best nodes).
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from real.engine import attention
from real.drafters.master_weights import MasterWeightAdamW
from real.drafters import CHECKPOINT_FORMAT, shipped_drafter
from real.drafters.eagle_session import EagleSession
from tltsim.core.errors import TltsimError
from tltsim.core.io import atomic_path

# decoder layers that are x + attn(norm(x)), then x + mlp(norm(x)), with rotary q/k and no extra norms
_PRE_NORM_LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer")


@dataclass(frozen=True)
class DrafterLoss:
    """Weights of the two loss terms (EAGLE's defaults)."""

    w_feat: float = 1.0  # SmoothL1 between predicted and true target feature
    w_tok: float = 0.1  # soft cross-entropy against the target's next-token distribution
    unroll: int = 1  # forward passes, each on the previous pass's features (training-time test; 1: off)


class Drafter(nn.Module):
    """See the module docstring. Build with `Drafter.for_target`, restore with `Drafter.load`."""

    kind = "eagle"
    features = "hidden"

    def __init__(self, target, seed: int = 0, draft_vocab: torch.Tensor | None = None):
        super().__init__()
        config = target.config
        decoder = target.get_decoder()
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden)
        self.layer = type(decoder.layers[0])(config, layer_idx=0)
        self.rotary = type(decoder.rotary_emb)(config=config)
        # shared with the target, frozen; a tuple keeps them out of parameters() and the state dict
        self._shared = (target.get_input_embeddings(), target.get_output_embeddings())
        head = self._shared[1]
        if draft_vocab is not None:  # the rows of the target's head for the draft vocabulary (EAGLE-3's d2t map)
            draft_vocab = torch.as_tensor(draft_vocab, dtype=torch.long, device=head.weight.device)
            if draft_vocab.dim() != 1 or len(draft_vocab) == 0 or int(draft_vocab.max()) >= head.weight.shape[0] \
                    or int(draft_vocab.min()) < 0 or len(draft_vocab.unique()) != len(draft_vocab):
                raise TltsimError(f"draft vocabulary: must be distinct token ids in [0, {head.weight.shape[0]})")
            self.register_buffer("draft_vocab", draft_vocab)
            self.register_buffer("_head_weight", head.weight.detach()[draft_vocab].clone(), persistent=False)
            bias = getattr(head, "bias", None)
            self.register_buffer("_head_bias", None if bias is None else bias.detach()[draft_vocab].clone(),
                                 persistent=False)
        else:
            self.draft_vocab = None
        gen = torch.Generator().manual_seed(seed)
        std = getattr(config, "initializer_range", 0.02)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if param.dim() >= 2:
                    param.copy_(torch.randn(param.shape, generator=gen) * std)
                elif name.endswith("bias"):
                    param.zero_()
        param = next(target.parameters())
        self.to(device=param.device, dtype=param.dtype)

    @classmethod
    def for_target(cls, target, seed: int = 0, draft_vocab: torch.Tensor | None = None) -> "Drafter":
        """A randomly initialised drafter for `target` (seeded), on the target's device and dtype; with
        `draft_vocab` (distinct target token ids) it proposes among those tokens only."""
        return cls(target, seed=seed, draft_vocab=draft_vocab)

    @classmethod
    def build(cls, target, model) -> "Drafter":
        """The drafter shipped for the known model `model` (real.models.hub.KNOWN's `drafter`)."""
        return cls.load(shipped_drafter(model), target)

    def session(self) -> EagleSession:
        return EagleSession(self)

    @property
    def embed(self) -> nn.Module:
        return self._shared[0]

    @property
    def lm_head(self) -> nn.Module:
        """The target's lm_head (over the full vocabulary)."""
        return self._shared[1]

    def head(self, g: torch.Tensor) -> torch.Tensor:
        """Draft logits over the draft vocabulary (the full one when none was given) for features g [..., H]."""
        if self.draft_vocab is None:
            return self.lm_head(g)
        return nn.functional.linear(g, self._head_weight, self._head_bias)

    def target_updated(self) -> None:
        """Copy the target's lm_head rows of the draft vocabulary again: the draft head is a copy, so after
        the target's weights change (a GRPO update) it would score with the old ones until refreshed."""
        if self.draft_vocab is None:
            return
        head = self.lm_head
        with torch.no_grad():
            self._head_weight.copy_(head.weight[self.draft_vocab])
            if self._head_bias is not None:
                self._head_bias.copy_(head.bias[self.draft_vocab])

    def to_target(self, index: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary indices (what `head`'s argmax / top-k return)."""
        return index if self.draft_vocab is None else self.draft_vocab[index]

    def forward(self, tokens, prev_features, position_ids, mask, cache=None):
        """g for inputs (x_i, f_{i-1}). tokens long [B, T]; prev_features [B, T, H]; position_ids long
        [B, T]; mask additive float [B, 1, T, K] over the K keys (cached + new), or None when every
        query sees every key; cache: a transformers Cache with one layer (appended to) or None. Returns g [B, T, H]."""
        with torch.no_grad():
            emb = self.embed(tokens)
        h = self.fc(torch.cat([emb, prev_features.to(emb.dtype)], dim=-1))
        rope = self.rotary(h, position_ids)
        if type(self.layer).__name__ in _PRE_NORM_LAYERS:
            return self._pre_norm_layer(h, rope, mask, None if cache is None else cache.layers[0])
        return self.layer(h, attention_mask=mask, position_ids=position_ids, cache=cache,
                          use_cache=cache is not None, position_embeddings=rope)

    def _pre_norm_layer(self, h, rope, mask, cache_layer):
        """`self.layer`'s forward for the _PRE_NORM_LAYERS types, computed from its parts' weights: the
        same arithmetic as calling the layer (RMSNorm as one fused op), without transformers' and
        torch's per-module dispatch, which at drafter sizes costs as much as the arithmetic.
        rope: (cos, sin); cache_layer: a transformers cache layer that takes the new keys and values
        (`update`), or None."""
        layer, attn, mlp = self.layer, self.layer.self_attn, self.layer.mlp
        batch, t, _ = h.shape
        x = _rms_norm(layer.input_layernorm, h)
        heads = (batch, t, -1, attn.head_dim)
        q = _linear(attn.q_proj, x).view(heads).transpose(1, 2)
        k = _linear(attn.k_proj, x).view(heads).transpose(1, 2)
        v = _linear(attn.v_proj, x).view(heads).transpose(1, 2)
        q, k = sys.modules[type(layer).__module__].apply_rotary_pos_emb(q, k, *rope)
        if cache_layer is not None:
            k, v = cache_layer.update(k, v)
        out = None if self.training else attention.attend_few(q, k, v, mask, attn.scaling)  # [B, T, Hq, D]
        if out is None:
            out = nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=attn.attention_dropout if self.training else 0.0, scale=attn.scaling,
                enable_gqa=True).transpose(1, 2)
        h = h + _linear(attn.o_proj, out.reshape(batch, t, -1))
        x = _rms_norm(layer.post_attention_layernorm, h)
        return h + _linear(mlp.down_proj, mlp.act_fn(_linear(mlp.gate_proj, x)) * _linear(mlp.up_proj, x))

    def loss(self, tokens: torch.Tensor, features: torch.Tensor, lengths: torch.Tensor,
             weights: DrafterLoss = DrafterLoss()) -> torch.Tensor:
        """Mean loss over a padded batch of sequences.

        tokens long [B, L]; features [B, L - 1, H] (f_0 .. f_{L-2}, what the target's forward produced
        for every token but the last); lengths long [B] (tokens per row, >= 2). Position i in
        0 .. lengths[b] - 2 predicts f_i from (x_i, f_{i-1}).
        """
        batch, length = tokens.shape
        n = length - 1
        prev = torch.cat([features.new_zeros(batch, 1, features.shape[2]), features[:, :-1]], dim=1)
        valid = torch.arange(n, device=tokens.device)[None, :] < (lengths[:, None] - 1)  # [B, n]
        causal = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
        allowed = causal[None] & valid[:, None, :]
        allowed = allowed | torch.eye(n, dtype=torch.bool, device=tokens.device)[None]  # padded queries see themselves
        mask = torch.zeros(allowed.shape, dtype=features.dtype, device=tokens.device)
        mask = mask.masked_fill(~allowed, torch.finfo(features.dtype).min)[:, None]
        positions = torch.arange(n, device=tokens.device)[None].expand(batch, n)
        with torch.no_grad():  # with a draft vocabulary: the target's distribution renormalised over it
            p_target = torch.softmax(self.head(features), dim=-1)
        total = 0.0
        for _ in range(max(1, weights.unroll)):
            g = self.forward(tokens[:, :n], prev, positions, mask)
            feat = nn.functional.smooth_l1_loss(g, features, reduction="none").mean(dim=-1)
            ce = -(p_target * torch.log_softmax(self.head(g), dim=-1)).sum(dim=-1)
            total = total + ((weights.w_feat * feat + weights.w_tok * ce) * valid).sum() / valid.sum()
            prev = torch.cat([g.new_zeros(batch, 1, g.shape[2]), g[:, :-1]], dim=1)  # its own, for the next pass
        return total / max(1, weights.unroll)

    def train_step(self, pairs, optimizer: MasterWeightAdamW, weights: DrafterLoss = DrafterLoss()) -> float:
        """One optimiser step on a batch of (tokens long [L], features [L - 1, H]) pairs; returns the loss."""
        tokens, features, lengths = _pad(pairs, self.fc.weight.device)
        self.train()
        optimizer.zero_grad()
        loss = self.loss(tokens, features, lengths, weights)
        loss.backward()
        optimizer.step()
        return loss.item()

    def fit(self, pairs, steps: int, batch_size: int = 8, lr: float = 1e-3, seed: int = 0,
            weights: DrafterLoss = DrafterLoss(), log=None) -> list[float]:
        """Train on (tokens, features) pairs for `steps` AdamW steps of `batch_size` pairs drawn
        (seeded) without replacement per pass; returns the loss of every step (each also passed to
        `log(step, loss)` when given)."""
        pairs = [(t, f) for t, f in pairs if len(t) >= 2]
        if not pairs:
            raise TltsimError("drafter fit: no training pair has 2 or more tokens; generate longer sequences")
        rng = random.Random(seed)
        optimizer = MasterWeightAdamW(self.parameters(), lr=lr)
        losses, order = [], []
        for _ in range(steps):
            if len(order) < batch_size:
                order += rng.sample(range(len(pairs)), len(pairs))
            batch, order = order[:batch_size], order[batch_size:]
            losses.append(self.train_step([pairs[i] for i in batch], optimizer, weights))
            if log is not None:
                log(len(losses), losses[-1])
        self.eval()
        return losses

    def save(self, path: str | Path, dtype: torch.dtype | None = None, meta: dict | None = None) -> None:
        """Write the trainable part (fc and the decoder layer) and the draft vocabulary to `path`, atomically;
        floating-point weights in `dtype` (default: as they are), `meta` (provenance) beside them."""
        state = {k: v.detach().cpu().to(dtype) if dtype is not None and v.is_floating_point() else v.detach().cpu()
                 for k, v in self.state_dict().items()}
        payload = {"format": CHECKPOINT_FORMAT, "hidden_size": self.fc.out_features, "state": state, "meta": meta or {}}
        with atomic_path(path) as tmp:
            torch.save(payload, tmp)

    @classmethod
    def load(cls, path: str | Path, target) -> "Drafter":
        """A drafter for `target` with the trainable part read from `path` (written by `save`)."""
        path = Path(path)
        if not path.exists():
            raise TltsimError(f"{path}: no such drafter checkpoint; write one with Drafter.save")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a directory, or a file that is no checkpoint: its unpickler fails with what it meets
            payload = None
        if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
            raise TltsimError(f"{path}: not a drafter checkpoint (format {CHECKPOINT_FORMAT}); write one with Drafter.save")
        drafter = cls(target, draft_vocab=payload["state"].get("draft_vocab"))
        if payload["hidden_size"] != drafter.fc.out_features:
            raise TltsimError(f"{path}: drafter hidden size {payload['hidden_size']} does not match the target's "
                              f"{drafter.fc.out_features}; train a drafter for this target")
        dtype = drafter.fc.weight.dtype
        drafter.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in payload["state"].items()})
        drafter.eval()
        return drafter


def _linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return nn.functional.linear(x, module.weight, module.bias)


def _rms_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A transformers Llama / Qwen2 RMSNorm module's forward as one op."""
    return nn.functional.rms_norm(x, module.weight.shape, module.weight, module.variance_epsilon)


def _pad(pairs, device):
    """Right-pad (tokens [L], features [L-1, H]) pairs into tokens [B, L], features [B, L-1, H], lengths [B]."""
    lengths = torch.tensor([len(t) for t, _ in pairs], device=device)
    length = int(lengths.max())
    hidden = pairs[0][1].shape[1]
    tokens = torch.zeros(len(pairs), length, dtype=torch.long, device=device)
    features = torch.zeros(len(pairs), length - 1, hidden, dtype=pairs[0][1].dtype, device=device)
    for b, (t, f) in enumerate(pairs):
        tokens[b, : len(t)] = torch.as_tensor(t, device=device)
        features[b, : len(t) - 1] = f.to(device)
    return tokens, features, lengths
