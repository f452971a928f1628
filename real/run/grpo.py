"""The GRPO update of the target, data-parallel over the workers.

GRPO (Shao et al., 2024) scores each response against the other responses to the same prompt:
the advantage of response j of prompt i is A_ij = (r_ij - mean_j r_ij) / (std_j r_ij + 1e-6), the
same for every token of the response. The update is PPO's clipped surrogate per response token t,

    ratio_t = exp(logp_t - logp_old_t)
    loss_t  = -min(ratio_t A, clip(ratio_t, 1 - eps, 1 + eps) A) + beta * KL_t

with logp_old from a separate forward of the policy that generated the responses (the "reward"
stage, as verl does) and KL_t the k3 estimate exp(ref - logp) - (ref - logp) - 1 against a frozen
reference (only when beta > 0). The loss is the mean over every response token of every worker:
each worker sums its tokens' losses, divides by the global token count, and the gradients are
summed over workers (all-reduce), so every worker takes the same AdamW step and the targets stay
identical (that is the target's weight sync).

Forwards run on micro-batches of responses sorted by length, each at most `micro_batch_tokens`
padded tokens (gradients accumulate over them), so the cost follows the tokens of the responses
rather than rows x the longest (verl removes padding for the same reason); the result is the
one-batch update's, up to float rounding.
"""
from __future__ import annotations

import contextlib
import socket

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from tltsim.core.padding import micro_batches
from real.models import lora
from real.settings import GRPOConfig
from tltsim.core.errors import TltsimError


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    """Advantages [P, G] from rewards [P, G]: (r - group mean) / (group std + 1e-6); 0 where a group agrees."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [prompts, group], got shape {rewards.shape}")
    return (rewards - rewards.mean(axis=1, keepdims=True)) / (rewards.std(axis=1, keepdims=True) + 1e-6)


def response_logprobs(model, prompts: list[list[int]], responses: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each response token under `model`, and which entries are real tokens.

    Returns logp float32 [B, R] (R = longest response) and mask bool [B, R]; gradients flow when
    the caller has them enabled. Sequences are right-padded; padding is masked out of attention.
    The decoder's last hidden states of the response positions go through the lm_head in chunks of
    LOGPROB_CHUNK positions (`token_logprobs`), so no [B, width, vocabulary] logits exist at once.
    """
    device = next(model.parameters()).device
    lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, longest = max(lens), max(len(r) for r in responses)
    ids = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    attn = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    index = torch.zeros(len(prompts), longest, dtype=torch.long, device=device)  # hidden state predicting each token
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool, device=device)
    targets = torch.zeros(len(prompts), longest, dtype=torch.long, device=device)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        ids[b, : lens[b]] = torch.as_tensor(p + r, device=device)
        attn[b, : lens[b]] = 1
        index[b, : len(r)] = torch.arange(len(p) - 1, len(p) + len(r) - 1, device=device)
        targets[b, : len(r)] = torch.as_tensor(r, device=device)
        mask[b, : len(r)] = True
    hidden = model.get_decoder()(input_ids=ids, attention_mask=attn).last_hidden_state  # [B, width, H]
    hidden = hidden.gather(1, index[:, :, None].expand(-1, -1, hidden.shape[2]))  # [B, R, H]
    logp = token_logprobs(model.get_output_embeddings(), hidden.reshape(-1, hidden.shape[2]), targets.reshape(-1))
    return logp.view(targets.shape) * mask, mask


LOGPROB_CHUNK = 256  # positions per lm_head chunk: [256, vocabulary] float logits (48 MiB at SmolLM2's 49152)


def token_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor, chunk: int = LOGPROB_CHUNK) -> torch.Tensor:
    """log softmax(head(hidden))[target] per row of hidden [N, H], targets long [N] -> float32 [N], `chunk` rows
    at a time. With gradients on, each chunk is checkpointed: its logits are recomputed in the backward pass
    instead of kept, so the memory is a chunk's logits, not N rows'."""
    def part(h, t):
        logits = head(h).float()
        return logits.gather(1, t[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)

    grad = torch.is_grad_enabled() and hidden.requires_grad
    out = [checkpoint(part, h, t, use_reentrant=False) if grad else part(h, t)
           for h, t in zip(hidden.split(chunk), targets.split(chunk))]
    return torch.cat(out) if out else hidden.new_zeros(0)


def token_losses(logp, old, adv, mask, clip: float, ref=None, kl: float = 0.0) -> torch.Tensor:
    """Per-token GRPO loss [B, R] (zero on padding). logp, old, ref [B, R]; adv [B] (per response)."""
    ratio = torch.exp(logp - old)
    a = adv[:, None]
    loss = -torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
    if ref is not None and kl > 0:
        d = ref - logp
        loss = loss + kl * (torch.exp(d) - d - 1)
    return loss * mask


class GRPO:
    """The target's optimizer and update; one per worker, all holding identical weights.

    `old_logprobs` is the reward stage's forward; `update` the training stage. With a process group
    initialised, `update` all-reduces gradients and token counts over `group` (default: every worker); without one
    it trains alone.
    """

    def __init__(self, model, config: GRPOConfig = GRPOConfig(), reference=None, seed: int = 0, group=None):
        if config.kl > 0 and reference is None:
            raise TltsimError("grpo kl > 0 needs a reference model")
        self.model = lora.add_lora(model, config.lora_rank, seed) if config.lora_rank else model
        if config.gradient_checkpointing:  # transformers' own: active in training mode with gradients only
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        self.config = config
        self.reference = reference
        self.params = [p for p in model.parameters() if p.requires_grad]  # what the update trains
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr)
        self.group = group  # the workers that train (torch.distributed's default group when None)

    def trained_rows(self, advantages) -> list[int]:
        """The rows `update` computes: all, or with `skip_zero_advantage` (and no KL term) those whose advantage
        is not zero (a group whose rewards agree adds exactly nothing to the gradient)."""
        adv = np.asarray(advantages, dtype=np.float64)
        if self.config.skip_zero_advantage and self.config.kl == 0:
            return np.flatnonzero(adv != 0).tolist()
        return list(range(len(adv)))

    @torch.no_grad()
    def old_logprobs(self, prompts, responses, advantages=None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(old, ref) log-probs [B, R] of the responses under the rollout policy and the reference (None if unused),
        of `trained_rows(advantages)` when given (zeros elsewhere: the update does not read them)."""
        if not prompts:
            return None, None
        rows = self.trained_rows(advantages) if advantages is not None else list(range(len(prompts)))
        self.model.eval()
        old = self._logprobs(self.model, prompts, responses, rows)
        ref = self._logprobs(self.reference, prompts, responses, rows) if self.config.kl > 0 else None
        return old, ref

    def _logprobs(self, model, prompts, responses, rows: list[int]) -> torch.Tensor:
        """`response_logprobs` of `rows` over micro-batches, gathered into one [B, R] tensor."""
        out = torch.zeros(len(prompts), max(len(r) for r in responses))
        for part in micro_batches([len(prompts[i]) + len(responses[i]) for i in rows], self.config.micro_batch_tokens):
            mb = [rows[j] for j in part]
            logp, _ = response_logprobs(model, [prompts[i] for i in mb], [responses[i] for i in mb])
            out[mb, : logp.shape[1]] = logp.cpu()
        return out

    def update(self, prompts, responses, advantages, old, ref, generated: list[list[bool]] | None = None) -> dict:
        """`mini_batches` AdamW steps on this worker's responses, gradients summed over workers.

        Every worker calls this with its own share (possibly empty) the same number of times. `generated` (per
        response, per token: whether the model generated it; a multi-turn response holds tools' answers too): the
        loss covers the generated tokens only (default: every token).
        Returns {"loss": global mean token loss of the last mini-batch, "clip_frac": share of clipped tokens}.
        """
        cfg = self.config
        chunks = np.array_split(np.arange(len(prompts)), cfg.mini_batches)
        adv_all = torch.as_tensor(np.asarray(advantages, dtype=np.float32))
        trained = set(self.trained_rows(advantages))
        stats = {}
        device = next(self.model.parameters()).device
        self.model.train()
        with lora.unmerged(self.model) if cfg.lora_rank else contextlib.nullcontext():
            for rows in chunks:
                self.optimizer.zero_grad(set_to_none=False)
                local = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, clipped tokens
                counted = [sum(generated[i]) if generated is not None else len(responses[i]) for i in rows]
                total = _all_reduce(torch.tensor([float(sum(counted))], dtype=torch.float64, device=device),
                                    self.group)[0]
                sel = [i for i in rows.tolist() if i in trained]
                lengths = [len(prompts[i]) + len(responses[i]) for i in sel]
                for part in micro_batches(lengths, cfg.micro_batch_tokens) if sel else []:
                    mb = [sel[j] for j in part]
                    logp, mask = response_logprobs(self.model, [prompts[i] for i in mb], [responses[i] for i in mb])
                    if generated is not None:  # a tool's answer is read, not generated: no loss on it
                        own = torch.zeros_like(mask)
                        for k, i in enumerate(mb):
                            own[k, : len(generated[i])] = torch.as_tensor(generated[i], dtype=torch.bool)
                        mask = mask & own
                    width = logp.shape[1]
                    o = old[mb, :width].to(logp.device)
                    r = ref[mb, :width].to(logp.device) if ref is not None else None
                    per_token = token_losses(logp, o, adv_all[mb].to(logp.device), mask, cfg.clip, r, cfg.kl)
                    (per_token.sum() / total).backward()
                    clipped = ((torch.exp(logp - o).detach() - 1).abs() > cfg.clip) & mask
                    local += torch.tensor([float(per_token.sum().detach()), float(clipped.sum())],
                                          dtype=torch.float64, device=device)
                for p in self.params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                all_reduce_tensors([p.grad for p in self.params], self.group)
                torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.optimizer.step()
                tot = _all_reduce(local, self.group)
                stats = {"loss": float(tot[0] / max(total, 1.0)), "clip_frac": float(tot[1] / max(total, 1.0))}
        self.model.eval()
        return stats

    def save_target(self, directory) -> None:
        """The target's weights as a save_pretrained directory (a LoRA target's merged, its adapters beside)."""
        if self.config.lora_rank:
            lora.save_merged(self.model, directory)
        else:
            self.model.save_pretrained(directory)

    def resume(self, directory) -> None:
        """After building on a checkpoint's target directory: a LoRA target's adapters, as saved (else nothing)."""
        if self.config.lora_rank:
            lora.resume(self.model, directory)


def all_reduce_tensors(tensors: list[torch.Tensor], group=None) -> None:
    """Sum each tensor over the workers of `group` (default: all), in place (a no-op without a process group): one
    all-reduce of them all, flattened, as DDP buckets gradients (a call per tensor costs a round trip each). One
    dtype and device."""
    if not tensors or not _distributed(group):
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, group=group)
    for t, part in zip(tensors, flat.split([t.numel() for t in tensors])):
        t.copy_(part.view_as(t))


def _all_reduce(t: torch.Tensor, group=None) -> torch.Tensor:
    """Sum `t` over the workers of `group` (default: all) in place (a no-op without a process group); returns it."""
    if _distributed(group):
        dist.all_reduce(t, group=group)
    return t


def _distributed(group=None) -> bool:
    """Whether a process group with other workers exists (else every all-reduce is a no-op)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def free_port() -> int:
    """A free TCP port on this host (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def barrier() -> None:
    """Wait for every worker (a no-op without a process group)."""
    if _distributed():
        dist.barrier()
