"""History drafting: draft tokens from the rollout's own text, with no model (the drafter kind "suffix").

In GRPO the G samples of a prompt share much of their text, and a prompt comes back in later steps; a
response also repeats its prompt (names, numbers) and itself. This drafter indexes, per prompt, the
prompt, the responses of its sibling rows as they are generated (in-flight siblings included: a row's
tokens go in at every catch-up), and the finished responses of that prompt from earlier engines (earlier
steps), and drafts from each row's longest context suffix that the index has seen continued
(SuffixDecoding's rule, Oliaro et al. 2024; DAS applies a suffix structure over recent rollouts to RL).

The index is a suffix trie truncated at depth DEPTH with counts: a node is a token string s of length
<= DEPTH, its count the number of places s ends in the indexed text (a response's strings may begin in
its prompt's last tokens, so the first tokens of a sibling's answer are found after the prompt). Why this
structure: it extends online in DEPTH steps a token (each document keeps the nodes of its suffixes), it
removes a document exactly by replaying it with counts going down (the memory cap evicts the oldest
finished response first, which a suffix automaton cannot do without a rebuild and a suffix array only by
rebuilding), and its counts are the match statistics a draft's confidence needs. SuffixDecoding uses the
same truncated tree. No package serves here: arctic-inference (Snowflake's, with the C++ suffix tree of
vLLM's `suffix` method) ships as a source distribution only, whose build needs torch >= 2.10, cmake and
nanobind and installs a vLLM plugin; the other suffix-tree packages on PyPI index strings, not token ids,
and keep no counts.

Drafting a row (`SuffixSession.matches`): the longest suffix of its committed tokens, of at most MAX_MATCH
tokens, whose node has children (places where the text went on); then the most frequent child, again and
again (ties: the child seen first), re-matching the extended context where the trie ends, up to the
strategy's `verify` tokens. Each draft token's probability is count(child) / (count(children) + 1) (a
string seen continued once gets 1/2, three agreeing times 3/4), the chain's expected accepted tokens the
sum of the running products: the confidence `real.drafters.hybrid` weighs. A row with no match gets no real draft
(its chain repeats the root; the target rejects or accepts it as any draft), so a row pays the verification
of `verify` tokens either way. Proposals are deterministic tokens, verified by real.engine.sampling's lossless rule
like every drafter's (real.drafters): the output keeps the target's distribution.

Memory: finished responses are kept up to `max_tokens` tokens over all prompts (oldest out first, a prompt's
whole index dropped with its last response once no row of it runs); the trie holds at most DEPTH nodes a token.
`remember` adds a response decoded elsewhere (another worker's); `state_dict` is the history as plain data (the
responses and their prompts, not the trie), from which `load_state_dict` rebuilds the index (a run's checkpoint).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from real.engine.spec import DraftTree
from tltsim.control.strategy import Strategy

DEPTH = 16  # longest string indexed (trie depth)
MAX_MATCH = 8  # longest context suffix matched (< DEPTH, so a match leaves room to continue)
MAX_TOKENS = 1 << 15  # finished response tokens kept over all prompts (the memory cap)


class _Node:
    __slots__ = ("count", "children")

    def __init__(self):
        self.count = 0
        self.children: dict[int, _Node] = {}


class _Document:
    """One indexed text: a prompt, or a response (indexed with its prompt's last tokens before it)."""

    def __init__(self, root: _Node, active: list[_Node]):
        self.root = root
        self.start = list(active)  # nodes of the suffixes before its first token (a response: its prompt's)
        self.active = list(active)  # nodes of the suffixes of length 1 .. DEPTH - 1 ending at its last token
        self.tokens: list[int] = []

    def extend(self, tokens: list[int]) -> None:
        for tok in tokens:
            nodes = []
            for parent in [self.root] + self.active:
                child = parent.children.get(tok)
                if child is None:
                    child = parent.children[tok] = _Node()
                child.count += 1
                nodes.append(child)
            self.active = nodes[: DEPTH - 1]
        self.tokens += tokens

    def remove(self) -> None:
        """Take its strings out of the trie (the counts it added), dropping nodes no text holds any more."""
        active = self.start
        for tok in self.tokens:
            nodes = []
            for parent in [self.root] + active:
                child = parent.children[tok]
                child.count -= 1
                if child.count == 0:
                    del parent.children[tok]
                nodes.append(child)
            active = nodes[: DEPTH - 1]
        self.tokens = []


class _Group:
    """A prompt's index: its trie, the prompt's document, its responses (running and finished)."""

    def __init__(self, prompt: list[int]):
        self.root = _Node()
        self.prompt = _Document(self.root, [])
        self.prompt.extend(prompt)
        self.running = 0  # rows of this prompt in some session
        self.finished = 0  # its responses in the drafter's history

    def open(self) -> _Document:
        self.running += 1
        return _Document(self.root, self.prompt.active)


@dataclass
class Match:
    """A row's history draft: `tokens` (up to the verify count), each one's probability `probs`, and the
    length of the context suffix the draft starts from (`length`; 0: the history has nothing)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    length: int = 0

    @property
    def expected(self) -> float:
        """Expected accepted draft tokens: the sum over k of the probability that the first k all are."""
        total, run = 0.0, 1.0
        for p in self.probs:
            run *= p
            total += run
        return total


class SuffixDrafter:
    """See the module docstring. Shared by the engines of a process: its history outlives each of them."""

    kind = "suffix"
    features = "none"

    def __init__(self, max_tokens: int = MAX_TOKENS):
        self.max_tokens = max_tokens
        self.groups: dict[tuple[int, ...], _Group] = {}
        self.history: deque[tuple[tuple[int, ...], _Document]] = deque()  # finished responses, oldest first
        self.history_tokens = 0

    @classmethod
    def build(cls, target, model) -> "SuffixDrafter":
        return cls()

    def session(self) -> "SuffixSession":
        return SuffixSession(self)

    def target_updated(self) -> None:
        """Nothing to refresh: the history is text (responses of the old weights still predict the new ones')."""

    def open(self, prompt: list[int]) -> tuple[tuple[int, ...], _Document]:
        key = tuple(prompt)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(prompt)
        return key, group.open()

    def close(self, key: tuple[int, ...], doc: _Document) -> None:
        """A row's response is complete: it joins the history, and the oldest finished ones leave past the cap."""
        group = self.groups[key]
        group.running -= 1
        group.finished += 1
        self.history.append((key, doc))
        self.history_tokens += len(doc.tokens)
        while self.history_tokens > self.max_tokens:
            old_key, old = self.history.popleft()
            self.history_tokens -= len(old.tokens)
            old.remove()
            self.groups[old_key].finished -= 1
            self._drop_if_unused(old_key)
        self._drop_if_unused(key)

    def remember(self, prompt: list[int], response: list[int]) -> None:
        """A finished response of `prompt` decoded elsewhere (another worker's engine) joins the history."""
        key, doc = self.open(prompt)
        doc.extend(list(response))
        self.close(key, doc)

    def state_dict(self) -> dict:
        """The history as plain data (for a drafter with no row running): each finished response's prompt and
        tokens, oldest first."""
        return {"history": [[list(key), list(doc.tokens)] for key, doc in self.history]}

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the index from `state_dict()`'s history, oldest first, into this drafter (emptied first): the
        same strings with the same counts, so the same draft probabilities; only between continuations seen
        equally often may the one chosen differ (the trie keeps the one indexed first, and the replay indexes
        whole responses in the order they finished, not their tokens in the order they were generated)."""
        self.groups, self.history, self.history_tokens = {}, deque(), 0
        for prompt, response in state["history"]:
            self.remember(prompt, response)

    def _drop_if_unused(self, key) -> None:
        group = self.groups.get(key)
        if group is not None and group.running == 0 and group.finished == 0:
            del self.groups[key]


class SuffixSession:
    """The rows of one engine: each row's open response document (real.drafters.DraftSession)."""

    def __init__(self, drafter: SuffixDrafter):
        self.drafter = drafter
        self.rows: list[tuple[tuple[int, ...], _Document]] = []
        self.tokens: list[list[int]] = []  # each row's committed tokens at the last catch-up

    def add(self, prompts: list[list[int]]) -> None:
        self.rows += [self.drafter.open(p) for p in prompts]

    def select(self, keep: list[int], done: list[list[int]]) -> None:
        leaving = sorted(set(range(len(self.rows))) - set(keep))
        for b, tokens in zip(leaving, done):
            key, doc = self.rows[b]
            doc.extend(list(tokens[len(key) + len(doc.tokens):]))
            self.drafter.close(key, doc)
        self.rows = [self.rows[b] for b in keep]

    def catch_up(self, tokens: list[list[int]], features=None) -> None:
        for (key, doc), row in zip(self.rows, tokens):
            doc.extend(row[len(key) + len(doc.tokens):])
        self.tokens = tokens

    def matches(self, n: int) -> list[Match]:
        """Each row's history draft of up to `n` tokens (after `catch_up`)."""
        return [_draft(self.drafter.groups[key].root, row, n) for (key, _), row in zip(self.rows, self.tokens)]

    def draft(self, roots: torch.Tensor, positions: torch.Tensor, strategy: Strategy) -> DraftTree:
        return chain(roots, self.matches(strategy.verify), strategy.verify)


def chain(roots: torch.Tensor, matches: list[Match], n: int) -> DraftTree:
    """The chains of `n` drafts of the rows' matches, each padded with its last token (the root's without one)."""
    drafts = []
    for root, m in zip(roots.tolist(), matches):
        last = m.tokens[-1] if m.tokens else root
        drafts.append(m.tokens + [last] * (n - len(m.tokens)))
    return DraftTree.chain_of(roots, torch.tensor(drafts, dtype=torch.long, device=roots.device))


def _longest(root: _Node, context: list[int]) -> tuple[_Node | None, int]:
    """The node of the longest suffix of `context` (at most MAX_MATCH tokens) that has children, and its length.
    Such suffixes are closed under shortening (a string seen continued has each of its suffixes seen continued),
    so the longest is found by bisection."""

    def walk(m: int) -> _Node | None:
        node = root
        for tok in context[len(context) - m:]:
            node = node.children.get(tok)
            if node is None:
                return None
        return node if node.children else None

    low, high, best = 0, min(MAX_MATCH, len(context)), None  # walk(low) holds (low 0: the root, if it has children)
    if not root.children:
        return None, 0
    best = root
    while low < high:
        mid = (low + high + 1) // 2
        node = walk(mid)
        if node is None:
            high = mid - 1
        else:
            low, best = mid, node
    return best, low


def _draft(root: _Node, context: list[int], n: int) -> Match:
    """Up to `n` tokens following `context` in the history under `root` (see the module docstring)."""
    node, length = _longest(root, context)
    match = Match(length=length)
    if node is None or length == 0:
        return match
    extended = list(context)
    while len(match.tokens) < n:
        if not node.children:
            node, m = _longest(root, extended)
            if node is None or m == 0:
                break
        total = sum(c.count for c in node.children.values())
        tok, node = max(node.children.items(), key=lambda kv: kv[1].count)
        match.tokens.append(tok)
        match.probs.append(node.count / (total + 1))
        extended.append(tok)
    return match
