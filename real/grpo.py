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

import socket

import numpy as np
import torch
import torch.distributed as dist

from tltsim.padding import micro_batches
from real.settings import GRPOConfig
from tltsim.errors import TltsimError





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
    """
    device = next(model.parameters()).device
    lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, longest = max(lens), max(len(r) for r in responses)
    ids = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    attn = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    index = torch.zeros(len(prompts), longest, dtype=torch.long, device=device)  # logit row predicting each token
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool, device=device)
    targets = torch.zeros(len(prompts), longest, dtype=torch.long, device=device)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        ids[b, : lens[b]] = torch.as_tensor(p + r, device=device)
        attn[b, : lens[b]] = 1
        index[b, : len(r)] = torch.arange(len(p) - 1, len(p) + len(r) - 1, device=device)
        targets[b, : len(r)] = torch.as_tensor(r, device=device)
        mask[b, : len(r)] = True
    logits = model(input_ids=ids, attention_mask=attn).logits.float()  # [B, width, V]
    logits = logits.gather(1, index[:, :, None].expand(-1, -1, logits.shape[2]))  # [B, R, V]
    logp = torch.log_softmax(logits, dim=-1).gather(2, targets[:, :, None])[:, :, 0]
    return logp * mask, mask


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
    initialised, `update` all-reduces gradients and token counts; without one it trains alone.
    """

    def __init__(self, model, config: GRPOConfig = GRPOConfig(), reference=None):
        if config.kl > 0 and reference is None:
            raise TltsimError("grpo kl > 0 needs a reference model")
        self.model = model
        self.config = config
        self.reference = reference
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)

    @torch.no_grad()
    def old_logprobs(self, prompts, responses) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(old, ref) log-probs [B, R] of the responses under the rollout policy and the reference (None if unused)."""
        if not prompts:
            return None, None
        self.model.eval()
        old = self._logprobs(self.model, prompts, responses)
        ref = self._logprobs(self.reference, prompts, responses) if self.config.kl > 0 else None
        return old, ref

    def _logprobs(self, model, prompts, responses) -> torch.Tensor:
        """`response_logprobs` over micro-batches, gathered into one [B, R] tensor."""
        out = torch.zeros(len(prompts), max(len(r) for r in responses))
        for rows in micro_batches([len(p) + len(r) for p, r in zip(prompts, responses)], self.config.micro_batch_tokens):
            logp, _ = response_logprobs(model, [prompts[i] for i in rows], [responses[i] for i in rows])
            out[rows, : logp.shape[1]] = logp.cpu()
        return out

    def update(self, prompts, responses, advantages, old, ref) -> dict:
        """`mini_batches` AdamW steps on this worker's responses, gradients summed over workers.

        Every worker calls this with its own share (possibly empty) the same number of times.
        Returns {"loss": global mean token loss of the last mini-batch, "clip_frac": share of clipped tokens}.
        """
        cfg = self.config
        chunks = np.array_split(np.arange(len(prompts)), cfg.mini_batches)
        adv_all = torch.as_tensor(np.asarray(advantages, dtype=np.float32))
        stats = {}
        device = next(self.model.parameters()).device
        self.model.train()
        for rows in chunks:
            self.optimizer.zero_grad(set_to_none=False)
            sel = rows.tolist()
            local = torch.zeros(3, dtype=torch.float64, device=device)  # tokens, loss sum, clipped tokens
            total = _all_reduce(torch.tensor([float(sum(len(responses[i]) for i in sel))], dtype=torch.float64,
                                             device=device))[0]
            lengths = [len(prompts[i]) + len(responses[i]) for i in sel]
            for part in micro_batches(lengths, cfg.micro_batch_tokens) if sel else []:
                mb = [sel[j] for j in part]
                logp, mask = response_logprobs(self.model, [prompts[i] for i in mb], [responses[i] for i in mb])
                width = logp.shape[1]
                o = old[mb, :width].to(logp.device)
                r = ref[mb, :width].to(logp.device) if ref is not None else None
                per_token = token_losses(logp, o, adv_all[mb].to(logp.device), mask, cfg.clip, r, cfg.kl)
                (per_token.sum() / total).backward()
                clipped = ((torch.exp(logp - o).detach() - 1).abs() > cfg.clip) & mask
                local += torch.tensor([float(mask.sum()), float(per_token.sum().detach()), float(clipped.sum())],
                                      dtype=torch.float64, device=device)
            for p in self.model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            all_reduce_tensors([p.grad for p in self.model.parameters()])
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            self.optimizer.step()
            tot = _all_reduce(local)
            stats = {"loss": float(tot[1] / max(tot[0], 1.0)), "clip_frac": float(tot[2] / max(tot[0], 1.0))}
        self.model.eval()
        return stats


def all_reduce_tensors(tensors: list[torch.Tensor]) -> None:
    """Sum each tensor over workers, in place (a no-op without a process group): one all-reduce of them all,
    flattened, as DDP buckets gradients (a call per tensor costs a round trip each). One dtype and device."""
    if not tensors or not _distributed():
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    for t, part in zip(tensors, flat.split([t.numel() for t in tensors])):
        t.copy_(part.view_as(t))


def _all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` over workers in place (a no-op without a process group); returns it."""
    if _distributed():
        dist.all_reduce(t)
    return t


def _distributed() -> bool:
    """Whether a process group with other workers exists (else every all-reduce is a no-op)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def free_port() -> int:
    """A free TCP port on this host (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def barrier() -> None:
    """Wait for every worker (a no-op without a process group)."""
    if _distributed():
        dist.barrier()
