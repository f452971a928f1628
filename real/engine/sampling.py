"""Sampling from the target, and the lossless acceptance rule that verifies a draft tree.

Target distribution. For logits z of one position, p = softmax(z / temperature) restricted to the
top-p nucleus (the most probable tokens, in order, until their mass reaches top_p; the token that
crosses top_p is kept) and renormalised. Plain sampling draws from p; verification walks the draft
tree with the very same p, which is what makes speculation lossless. Greedy decoding is the point
mass at argmax z (temperature and top-p do not apply).

Acceptance rule (speculative sampling, Leviathan et al. 2023 / Chen et al. 2023, in the multi-draft
recursive form of SpecInfer and EAGLE-2). The drafter proposes deterministic tokens (its top-k), so
each proposal is a point mass and the rule needs no draft probabilities. Walk from the root u:

    r := p_u                                      (residual, unnormalised)
    for each child c of u, in tree order:         (distinct tokens)
        accept c with probability r(c) / sum(r);  on rejection set r(c) := 0
    accepted token  -- a child that passed; the walk continues from it
    recovered token -- all children rejected: sample from r / sum(r); the walk ends
    bonus token     -- u has no children (every draft on the path was accepted): sample from p_u

Each step emits a token distributed exactly as p_u: child c_i is accepted with probability
p(c_i), since the earlier rejections leave mass 1 - p(c_1) - ... - p(c_{i-1}) and accepting takes
p(c_i) of it, and the recovered sample spreads the rest over the other tokens in proportion to p.
By induction the whole emitted sequence has the target's distribution. With greedy decoding the
walk accepts the child equal to argmax z_u and emits argmax z_u as the recovered or bonus token.

Replayed answers (`verify_chosen`). Where the token that follows each node is known beforehand (greedy:
argmax z_u; a run that replays another run's sampled answers: the recorded token at that position), the
walk accepts the child equal to it and emits it as the recovered or bonus token. For a recorded answer,
itself a draw from p_u, a child c is then accepted with probability p_u(c), as by the rule above, and the
emitted tokens are the recorded ones whatever is drafted: two runs on the same answers differ only in
how fast they produced them.
"""
from __future__ import annotations

import torch

from real.settings import SamplingParams
from tltsim.core.errors import TltsimError


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """p for logits [..., V]: softmax(logits / temperature) cut to the top-p nucleus, renormalised
    (in float32 at least, whatever the model's dtype)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    probs = torch.softmax(logits / params.temperature, dim=-1)
    return _nucleus(probs, params.top_p) if params.top_p < 1 else probs


NUCLEUS_CANDIDATES = 64  # most probable tokens the nucleus is first sought among; 8x as many each time they fall short


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """probs cut to the top-p nucleus, renormalised. The nucleus is sought among the NUCLEUS_CANDIDATES most
    probable tokens of each row (a top-k, not a sort of the whole vocabulary), and among 8x as many while some
    row's candidates hold less than the mass top_p (a margin above it, against rounding), up to every token."""
    vocab = probs.shape[-1]
    k = min(NUCLEUS_CANDIDATES, vocab)
    while True:
        sorted_p, order = probs.topk(k, dim=-1)  # descending
        if k == vocab or bool((sorted_p.sum(dim=-1) >= top_p + 1e-6).all()):
            break
        k = min(8 * k, vocab)
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # mass of the more probable tokens
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return probs / probs.sum(dim=-1, keepdim=True)


def next_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """Plain decoding: one token per row from logits [B, V] -> long [B]."""
    if params.greedy:
        return logits.argmax(dim=-1)
    return torch.multinomial(target_probs(logits, params), 1, generator=generator).squeeze(1)


def verify_tree(tokens: torch.Tensor, parents: torch.Tensor, logits: torch.Tensor, params: SamplingParams,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Walk each row's draft tree with the acceptance rule of the module docstring.

    tokens:  long [B, N]  node tokens; node 0 is the root (the last committed token, not a draft)
    parents: long [B, N]  parent node of each node (-1 for the root); a parent precedes its children
    logits:  [B, N, V]    target logits at each node (its distribution for the next token)
    Returns (path, accepted, next_token):
    path:       long [B, N]  visited nodes from the root, root first; entries past accepted[b] are -1
    accepted:   long [B]     draft tokens accepted (path length - 1)
    next_token: long [B]     the recovered or bonus token that follows the accepted drafts
    """
    batch, n = tokens.shape
    assert parents.shape == (batch, n) and logits.shape[:2] == (batch, n), (tokens.shape, parents.shape, logits.shape)
    if params.greedy:
        return verify_chosen(tokens, parents, logits.argmax(dim=-1))
    rows = torch.arange(batch, device=tokens.device)
    probs = target_probs(logits, params)
    cur = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    walking = torch.ones(batch, dtype=torch.bool, device=tokens.device)
    path = torch.full((batch, n), -1, dtype=torch.long, device=tokens.device)
    path[:, 0] = 0
    accepted = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    residual = probs[:, 0].clone()  # [B, V], r at the node where each row stops
    for _ in range(n - 1):
        is_child = (parents == cur[:, None]) & walking[:, None]  # [B, N]
        if not is_child.any():
            break
        found, nxt, r = _try_children(tokens, is_child, probs[rows, cur].clone(), generator)
        residual = torch.where(walking[:, None], r, residual)
        walking = walking & found
        cur = torch.where(walking, nxt, cur)
        accepted = accepted + walking.long()
        path[rows[walking], accepted[walking]] = cur[walking]
    # rows still walking stopped at a leaf the loop never expanded: their residual is p there
    residual = torch.where(walking[:, None], probs[rows, cur], residual)
    return path, accepted, torch.multinomial(residual, 1, generator=generator).squeeze(1)


def check_answers(answers: list[list[int]], rows: int, max_new_tokens: int, eos: set[int]) -> None:
    """TltsimError unless `answers` holds one recorded answer for each of `rows` rows, each ending at its first
    end-of-sequence token (one of `eos`) or at `max_new_tokens`."""
    if len(answers) != rows:
        raise TltsimError(f"add: {len(answers)} answers for {rows} prompts; give one per prompt")
    for i, a in enumerate(answers):
        if not 0 < len(a) <= max_new_tokens or (len(a) < max_new_tokens and a[-1] not in eos) \
                or any(t in eos for t in a[:-1]):
            raise TltsimError(f"answer {i}: {len(a)} tokens; an answer ends at its first end-of-sequence "
                              f"token or at max_new_tokens={max_new_tokens}")


def recorded_table(answers: list[list[int]], done: list[int], width: int) -> torch.Tensor:
    """long [B, width] on the CPU: the `width` recorded tokens of each row's answer after its first `done` ones, -1
    (which no draft equals) past the answer's end: what a replaying engine checks its drafts against."""
    table = torch.full((len(answers), width), -1, dtype=torch.long)
    for b, (answer, n) in enumerate(zip(answers, done)):
        ahead = answer[n: n + width]
        table[b, : len(ahead)] = torch.tensor(ahead, dtype=torch.long)
    return table


def verify_chosen(tokens: torch.Tensor, parents: torch.Tensor, chosen: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`verify_tree` where the token that follows each node is known: chosen long [B, N] (greedy: the argmax of
    the node's logits; replayed answers: the recorded token there). Walks to the child equal to it while there
    is one; same results as `verify_tree`, next_token being the chosen token where the walk stops."""
    batch, n = tokens.shape
    rows = torch.arange(batch, device=tokens.device)
    cur = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    walking = torch.ones(batch, dtype=torch.bool, device=tokens.device)
    path = torch.full((batch, n), -1, dtype=torch.long, device=tokens.device)
    path[:, 0] = 0
    accepted = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    for _ in range(n - 1):
        hit = (parents == cur[:, None]) & walking[:, None] & (tokens == chosen[rows, cur][:, None])
        walking = walking & hit.any(dim=1)
        if not walking.any():
            break
        cur = torch.where(walking, hit.long().argmax(dim=1), cur)
        accepted = accepted + walking.long()
        path[rows[walking], accepted[walking]] = cur[walking]
    return path, accepted, chosen[rows, cur]


def verify_greedy_chain(tokens: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`verify_tree` for greedy decoding when every row's tree is the chain 0 <- 1 <- ... <- N-1:
    draft i is accepted iff it and every draft before it equal the target's argmax at their parent.
    Same arguments (less the parents) and results."""
    batch, n = tokens.shape
    best = logits.argmax(dim=-1)  # [B, N]
    accepted = (tokens[:, 1:] == best[:, :-1]).long().cumprod(dim=1).sum(dim=1)
    nodes = torch.arange(n, device=tokens.device)[None].expand(batch, n)
    path = torch.where(nodes <= accepted[:, None], nodes, -1)
    return path, accepted, best.gather(1, accepted[:, None]).squeeze(1)


def _try_children(tokens, is_child, r, generator):
    """Offer each row's children in tree order; return (found [B], accepted node [B], residual r [B, V])."""
    batch = tokens.shape[0]
    rows = torch.arange(batch, device=tokens.device)
    rank = is_child.long().cumsum(dim=1) - 1  # sibling rank in tree order
    found = torch.zeros(batch, dtype=torch.bool, device=tokens.device)
    nxt = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    for k in range(int(is_child.sum(dim=1).max())):
        offered = is_child & (rank == k)
        has = offered.any(dim=1) & ~found
        node = offered.long().argmax(dim=1)
        tok = tokens[rows, node]
        u = torch.rand(batch, generator=generator, dtype=r.dtype, device=r.device)
        take = has & (u * r.sum(dim=1) < r[rows, tok])
        nxt = torch.where(take, node, nxt)
        found = found | take
        drop = has & ~take
        r[rows[drop], tok[drop]] = 0.0
    return found, nxt, r
