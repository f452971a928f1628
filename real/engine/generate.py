"""Batched generation, plain or speculative, switchable per iteration: the rollout engine.

An `Engine` holds the running rows of a batch. Each row's committed tokens are its prompt and what
it has generated; the last committed token is "pending": the target has not processed it yet, and
the next iteration feeds it (plain decoding feeds just it; speculative decoding feeds it as the root
of a draft tree). A row finishes on its own, at an end-of-sequence token (kept in its output) or at
`max_new_tokens`, and leaves the batch; `add` admits new rows at any time (continuous batching).

`step(mode=...)` ("decode" or "spec_decode", the records' state names) runs one iteration and
returns its `Iteration` record, so an outside policy can choose plain or speculative decoding, and
the strategy, at every iteration. The engine asks its drafter only what the drafter interface
(real.drafters) says: a session over the running rows, told of rows admitted and rows that left, caught
up and asked for a draft tree at every speculative iteration. The session keeps its state across plain
iterations: the first speculative iteration after plain ones catches it up on the tokens they emitted
(with the target features kept from their forwards, when the drafter reads them; the target is not run
again), and the first one of all, or after `set_drafter`, on every token of every running row. The target's
features are kept only when the drafter reads them or `collect_features` asks for them.

Replayed answers: `add(prompts, answers=...)` gives each row the answer it must produce (another run's recorded
response to the same prompt). The target still runs every forward, the drafter still drafts and the engine
still draws its own tokens (so an iteration costs what it costs in a run of its own), but the token that
follows each position is then the recorded one (real.engine.sampling, `verify_chosen`): drafts are accepted where
they equal it, and the row emits the recorded answer to its end. An engine replays every row or none.

Tool calls (`tools=`, a task's real.engine.tools.ToolUse): a row whose tokens of its current turn end with a complete
tool call pauses there (tokens a speculative iteration emitted after the call are dropped, as after an
end-of-sequence token). It leaves the running batch with its KV (its rows of the cache, cut to its committed
tokens) while the call runs on the engine's sandbox, concurrently with the other rows' decoding; `resume()` puts
every row whose answer is ready back into the batch: the answer's tokens are appended to the row and one prefill
onto its kept KV feeds exactly as many tokens as the answer has (the row's pending token and the answer but its
last token, which becomes the pending one), and the row decodes its next turn. `wait_tools()` blocks until a
paused row's answer is ready (for an engine whose running rows all wait on tools). A row calls at most
`max_tool_calls` tools; `max_new_tokens` caps the tokens the model generates, not the tools' answers. Each row
keeps its turns (`Turn`: context, prefill, tokens generated, the tool call after it) in `Finished.turns`, and
`Finished.tokens` holds the tools' answers between the turns' tokens. Verification is unchanged, so speculation
stays lossless across turns (greedy: the tokens of plain decoding with the same answers appended).
"""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

import torch

from real.engine import attention
from real.engine.kvcache import RaggedCache
from real.engine.sampling import (check_answers, next_tokens, recorded_table, verify_chosen, verify_greedy_chain,
                                  verify_tree)
from real.drafters import DraftSession, Drafting
from real.settings import GenerateSettings, SamplingParams
from real.engine.spec import DraftTree, draftable
from real.engine.records import Finished, Generation, Iteration, Turn
from real.engine.tools import Sandbox, ToolUse, runs_code
from real.models.targets import default_eos
from tltsim.core.errors import TltsimError
from tltsim.control.strategy import DEFAULT_STRATEGY as STRATEGY, Strategy

DEFAULT_STRATEGY = str(STRATEGY)  # a chain of 4 drafts (tltsim.control.strategy.DEFAULT_STRATEGY)


@dataclass
class _Paused:
    """A row waiting on its tool call, out of the running batch, with its KV."""

    prompt: list[int]
    tokens: list[int]
    turns: list[Turn]
    limit: int  # the row ends when it holds this many tokens
    cache: RaggedCache  # its rows of the engine's cache, cut to its committed tokens
    future: Future  # the call's ToolResult


class Engine:
    """A running batch over a transformers causal LM (Llama, Qwen2, ...). See the module docstring."""

    def __init__(self, target, drafter: Drafting | None = None, *, sampling: SamplingParams = SamplingParams(), max_new_tokens: int = 256,
                 eos_token_id: int | list[int] | None = None, seed: int = 0, collect_features: bool = False,
                 tools: ToolUse | None = None, sandbox: Sandbox | None = None, max_tool_calls: int = 4):
        if max_new_tokens < 1:
            raise TltsimError(f"max_new_tokens={max_new_tokens}: must be >= 1")
        if max_tool_calls < 0:
            raise TltsimError(f"max_tool_calls={max_tool_calls}: must be >= 0")
        config = target.config
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise TltsimError("target uses sliding-window attention, which this engine does not mask; "
                              "use a model with full attention")
        attention.use(target)  # decode and verify forwards attend without SDPA's per-forward copies of the cache
        self.target = target
        self.decoder = target.get_decoder()
        self.lm_head = target.get_output_embeddings()
        self.drafter = drafter
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        eos = default_eos(target) if eos_token_id is None else eos_token_id
        self.eos = set([] if eos is None else [eos] if isinstance(eos, int) else eos)
        self.collect_features = collect_features
        self._keep_features = collect_features or (drafter is not None and drafter.features == "hidden")
        param = next(target.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.vocab = self.lm_head.weight.shape[0]
        self.cache = self._new_cache(0)
        self.ids: list[int] = []  # request id of each running row
        self.prompts: list[list[int]] = []
        self.tokens: list[list[int]] = []  # committed tokens (prompt + generated) of each running row
        self.answers: list[list[int]] | None = None  # each running row's recorded answer, when the engine replays
        self.turns: list[list[Turn]] = []  # each running row's turns so far (the last one in progress)
        self.limits: list[int] = []  # a running row ends when it holds this many tokens (max_new_tokens generated)
        self.tools = tools
        self.sandbox = sandbox if sandbox is not None or tools is None else Sandbox(runs_code=runs_code(tools))
        self.max_tool_calls = max_tool_calls
        self._paused: dict[int, _Paused] = {}  # request id -> a row waiting on its tool, in the order they paused
        self.finished: dict[int, Finished] = {}
        self.iterations: list[Iteration] = []
        self._draft: DraftSession | None = None if drafter is None else drafter.session()
        self._last_mode = ""  # of the last step
        self._next_id = 0

    @property
    def running(self) -> int:
        return len(self.ids)

    @property
    def paused(self) -> int:
        """Rows waiting on a tool call (out of the running batch)."""
        return len(self._paused)

    def in_progress(self) -> dict[int, list[int]]:
        """Request id -> the tokens generated so far (tools' answers included) of each row admitted and not finished:
        running, or waiting on a tool."""
        rows = {i: t[len(p):] for i, p, t in zip(self.ids, self.prompts, self.tokens)}
        return {**rows, **{i: p.tokens[len(p.prompt):] for i, p in self._paused.items()}}

    def set_drafter(self, drafter: Drafting) -> None:
        """Use `drafter` from the next speculative iteration on (a new session, caught up on every running row)."""
        if drafter.features == "hidden" and not self._keep_features:
            raise TltsimError(f"set_drafter: a {drafter.kind} drafter reads target features, which this engine does "
                              f"not keep; start the engine with it (or with collect_features=True)")
        self.drafter, self._draft = drafter, drafter.session()
        self._draft.add(self.prompts)

    @torch.no_grad()
    def add(self, prompts: list[list[int]], answers: list[list[int]] | None = None,
            budgets: list[int] | None = None) -> list[int]:
        """Admit rows (non-empty token-id lists) and prefill them; returns their request ids. `answers` (one
        non-empty token-id list per prompt, ending at an end-of-sequence token or at max_new_tokens): what each
        row will emit (see the module docstring); give them for every row of the engine or for none. `budgets`
        (one per prompt, 1 to max_new_tokens; default max_new_tokens each): the tokens each row may generate, for
        a row resumed with tokens it generated before (they end its prompt) that must stop at the same cap."""
        for i, p in enumerate(prompts):
            if len(p) == 0 or not all(0 <= int(t) < self.vocab for t in p):
                raise TltsimError(f"prompt {i}: must be a non-empty list of token ids in [0, {self.vocab})")
        budgets = [self.max_new_tokens] * len(prompts) if budgets is None else [int(b) for b in budgets]
        if len(budgets) != len(prompts) or not all(1 <= b <= self.max_new_tokens for b in budgets):
            raise TltsimError(f"add: budgets {budgets}: give one per prompt, each 1 to max_new_tokens="
                              f"{self.max_new_tokens}")
        if answers is not None and budgets != [self.max_new_tokens] * len(prompts):
            raise TltsimError("add: an engine that replays recorded answers runs every row to max_new_tokens")
        if (answers is not None) != (self.answers is not None) and (self.ids or self.finished):
            raise TltsimError("add: an engine replays recorded answers for every row or for none")
        if answers is not None and self.tools is not None:
            raise TltsimError("add: an engine with tools does not replay recorded answers (its tools answer anew)")
        if answers is not None:
            check_answers(answers, len(prompts), self.max_new_tokens, self.eos)
            self.answers = (self.answers or []) + [list(map(int, a)) for a in answers]
        start = time.perf_counter()
        new = self._new_cache(len(prompts))
        self._prefill(new, [p[:-1] for p in prompts])  # the last prompt token stays pending
        self.cache.extend(new)
        if self._draft is not None:
            self._draft.add([list(map(int, p)) for p in prompts])
        ids = list(range(self._next_id, self._next_id + len(prompts)))
        self._next_id += len(prompts)
        self.ids += ids
        self.prompts += [list(map(int, p)) for p in prompts]
        self.tokens += [list(map(int, p)) for p in prompts]
        self.turns += [[Turn(len(p), len(p) - 1, len(self.iterations))] for p in prompts]
        self.limits += [len(p) + b for p, b in zip(prompts, budgets)]
        self._record("prefill", "", len(prompts), 0, [0] * len(prompts), sum(len(p) - 1 for p in prompts), start, False)
        return ids

    def _prefill(self, cache: RaggedCache, feeds: list[list[int]]) -> None:
        """Feed each row of `cache` (nothing pending) its tokens `feeds[b]` after its committed ones, in one forward,
        and commit them."""
        if max(len(f) for f in feeds) == 0:
            return
        tokens, slots, counts, visible = cache.padded_feed(feeds)
        cache.commit(slots, counts, self._forward(cache, tokens, cache.lens[:, None] + slots, visible))

    def wait_tools(self) -> None:
        """Block until some paused row's tool call has answered (at once when one has, or none is paused)."""
        if self._paused:
            wait([p.future for p in self._paused.values()], return_when=FIRST_COMPLETED)

    @torch.no_grad()
    def resume(self, limit: int | None = None) -> Iteration | None:
        """Put back into the batch every paused row whose tool has answered (see the module docstring), or the first
        `limit` of them, after the running rows, in the order they paused; returns the prefill's Iteration, or None
        when no answer was ready (or `limit` is 0)."""
        ready = [i for i, p in self._paused.items() if p.future.done()][:limit]
        if not ready:
            return None
        start = time.perf_counter()
        rows = [self._paused.pop(i) for i in ready]
        resumed, feeds = self._new_cache(0), []
        for p in rows:
            result = p.future.result()
            answer = [int(t) for t in self.tools.answer_ids(result.output)]
            if not all(0 <= t < self.vocab for t in answer):
                raise TltsimError(f"tool answer {result.output!r}: token ids outside [0, {self.vocab})")
            p.turns[-1].tool, p.turns[-1].tool_tokens = result, len(answer)
            feeds.append([p.tokens[-1]] + answer[:-1] if answer else [])
            p.tokens += answer
            p.limit += len(answer)
            p.turns.append(Turn(len(p.tokens), len(feeds[-1]), len(self.iterations)))
            resumed.extend(p.cache)
        self._prefill(resumed, feeds)
        self.cache.extend(resumed)
        if self._draft is not None:  # a new session row: it catches up on the whole row at the next spec iteration
            self._draft.add([p.prompt for p in rows])
        self.ids += ready
        self.prompts += [p.prompt for p in rows]
        self.tokens += [p.tokens for p in rows]
        self.turns += [p.turns for p in rows]
        self.limits += [p.limit for p in rows]
        return self._record("prefill", "", len(rows), 0, [0] * len(rows), sum(map(len, feeds)), start, False)

    @torch.no_grad()
    def step(self, mode: str = "decode", strategy: str | Strategy | None = None) -> Iteration:
        """One decoding iteration over every running row: "decode" (one token per row) or "spec_decode"
        (draft with `strategy`, verify in one target forward, emit accepted + 1 tokens per row)."""
        if self.running == 0:
            raise TltsimError("step: no running rows; add prompts first")
        start = time.perf_counter()
        roots = torch.tensor([t[-1] for t in self.tokens], device=self.device)
        reprefill = mode == "spec_decode" and self._last_mode != "spec_decode"
        catchup_s = 0.0
        if mode == "decode":  # the drafter's state is kept: the next spec iteration feeds it what plain ones emitted
            tree, label = DraftTree.root_only(roots), ""
        elif mode == "spec_decode":
            if self.drafter is None:
                raise TltsimError("step(mode='spec_decode') needs a drafter; pass drafter= to the engine")
            strat = draftable(strategy or DEFAULT_STRATEGY)
            t_catchup = time.perf_counter()
            self._draft.catch_up(self.tokens, self.cache.features if self.drafter.features == "hidden" else None)
            catchup_s = time.perf_counter() - t_catchup if reprefill else 0.0
            tree, label = self._draft.draft(roots, self.cache.lens, strat), str(strat)
        else:
            raise TltsimError(f"step: mode {mode!r} is not 'decode' or 'spec_decode'")
        positions = self.cache.lens[:, None] + tree.depth
        t_target = self._clock()
        hidden = self._forward(self.cache, tree.tokens, positions, tree.visible())
        logits = self.lm_head(hidden)
        t_verify = self._clock()
        if mode == "decode":  # same rule as a one-node tree, without the walk
            path = torch.zeros_like(roots)[:, None]
            accepted, nxt = torch.zeros_like(roots), next_tokens(logits[:, 0], self.sampling, self.generator)
        elif tree.chain and self.sampling.greedy:
            path, accepted, nxt = verify_greedy_chain(tree.tokens, logits)
        else:
            path, accepted, nxt = verify_tree(tree.tokens, tree.parents, logits, self.sampling, self.generator)
        if self.answers is not None:  # the engine's own draw is made (its cost is a run's) and replaced
            path, accepted, nxt = verify_chosen(tree.tokens, tree.parents, self._recorded(tree.depth))
        self.cache.commit(path.clamp(min=0), accepted + 1, hidden)
        emitted = self._append(tree.tokens, path, accepted, nxt)
        self._last_mode = mode
        return self._record(mode, label, len(roots), tree.tokens.shape[1] - 1, accepted.tolist(), emitted, start, reprefill,
                            catchup_s, draft_s=t_target - start if mode == "spec_decode" else 0.0, target_s=t_verify - t_target)

    def _recorded(self, depth: torch.Tensor) -> torch.Tensor:
        """long [B, N]: each row's recorded token after each tree node (at `depth` below the pending token); -1,
        which no draft equals, past the answer's end (never emitted: the row finishes at its last token)."""
        done = [len(t) - len(p) for t, p in zip(self.tokens, self.prompts)]
        return recorded_table(self.answers, done, int(depth.max()) + 1).to(self.device).gather(1, depth)

    def _clock(self) -> float:
        """perf_counter once the device has finished the work queued so far (a no-op wait on the CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _append(self, tree_tokens, path, accepted, nxt) -> int:
        """Commit each row's accepted drafts and next token, finish rows, pause rows at a tool call, shrink the
        batch; returns tokens emitted."""
        drafts = tree_tokens.gather(1, path.clamp(min=0)).tolist()
        keep, done_rows, calls, emitted = [], [], {}, 0
        tools, index = self.tools, len(self.iterations)
        for b, (n_acc, last) in enumerate(zip(accepted.tolist(), nxt.tolist())):
            tokens, limit = self.tokens[b], self.limits[b]
            done = False
            call = None
            turn = self.turns[b][-1]
            may_call = tools is not None and len(self.turns[b]) <= self.max_tool_calls
            for tok in drafts[b][1 : n_acc + 1] + [last]:
                tokens.append(tok)
                emitted += 1
                if tok in self.eos or len(tokens) >= limit:
                    done = True
                    break
                if may_call and (call := tools.call(tokens[turn.context:])) is not None:
                    break
            if done or call is not None:
                turn.generated, turn.end_iteration = len(tokens) - turn.context, index
            if done:
                self._finish(b)
                done_rows.append(tokens)
            elif call is not None:
                calls[b] = call
            else:
                keep.append(b)
        if calls:
            self._pause(calls, keep, done_rows)
        elif len(keep) < self.running:
            self._select(keep, done_rows)
        return emitted

    def _pause(self, calls: dict[int, str], keep: list[int], done_rows: list[list[int]]) -> None:
        """Take the rows `calls` names out of the batch with their KV (cut to their committed tokens, all but the
        pending last one), start their tool calls, and keep the rows `keep`."""
        rows = sorted(calls)
        for b in rows:
            cache = self.cache.take(torch.tensor([b], dtype=torch.long, device=self.device))
            cache.cut(torch.tensor([len(self.tokens[b]) - 1], device=self.device))
            self._paused[self.ids[b]] = _Paused(self.prompts[b], self.tokens[b], self.turns[b], self.limits[b], cache,
                                                self.sandbox.submit(calls[b]))
        staying = sorted(keep + rows)
        if len(staying) < self.running:  # rows that finished leave first: the session closes them (their `done`)
            self._select(staying, done_rows)
        self._select([staying.index(b) for b in keep], [])  # paused rows leave unclosed: they come back

    def _select(self, keep: list[int], done_rows: list[list[int]]) -> None:
        rows = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.cache.select(rows)
        if self._draft is not None:
            self._draft.select(keep, done_rows)
        self.ids = [self.ids[b] for b in keep]
        self.prompts = [self.prompts[b] for b in keep]
        if self.answers is not None:
            self.answers = [self.answers[b] for b in keep]
        self.tokens = [self.tokens[b] for b in keep]
        self.turns = [self.turns[b] for b in keep]
        self.limits = [self.limits[b] for b in keep]

    def _finish(self, b: int) -> None:
        prompt, tokens = self.prompts[b], self.tokens[b]
        features = None
        if self.collect_features:
            features = self.cache.features[b, : len(tokens) - 1].detach().clone()
        self.finished[self.ids[b]] = Finished(self.ids[b], prompt, tokens[len(prompt):], features, self.turns[b])

    def _forward(self, cache: RaggedCache, tokens, positions, visible) -> torch.Tensor:
        """Target forward of tokens [B, T] at positions [B, T] over `cache`; returns features [B, T, H]."""
        out = self.decoder(input_ids=tokens, attention_mask=cache.mask(visible), position_ids=positions,
                           cache=cache.cache, use_cache=True)
        return out.last_hidden_state

    def _new_cache(self, batch: int) -> RaggedCache:
        config = self.target.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return RaggedCache(config.num_hidden_layers, batch, config.num_key_value_heads, head_dim, self.dtype,
                           self.device, feature_dim=config.hidden_size if self._keep_features else None)

    def _record(self, mode, strategy, batch, proposed, accepted, tokens, start, reprefill, catchup_s=0.0,
                draft_s=0.0, target_s=0.0) -> Iteration:
        it = Iteration(len(self.iterations), mode, strategy, batch, proposed, accepted, tokens,
                       time.perf_counter() - start, reprefill, catchup_s, draft_s, target_s)
        self.iterations.append(it)
        return it


def generate(target, prompts: list[list[int]], drafter: Drafting | None = None,
             settings: GenerateSettings = GenerateSettings(), tools: ToolUse | None = None,
             sandbox: Sandbox | None = None) -> Generation:
    """Generate for every prompt (token-id lists) until EOS or `settings.max_new_tokens`.

    With a drafter, every iteration speculates with `settings.strategy` (default DEFAULT_STRATEGY, a chain of 4); without, it
    decodes plainly. Either way the output has the target's distribution (greedy: the same tokens).
    `settings.eos_token_id` defaults to `default_eos(target)`. `tools`: rows pause at tool calls and resume with
    their answers (see the module docstring), run on `sandbox` (default: a new one).
    """
    engine = Engine(target, drafter, sampling=settings.sampling, max_new_tokens=settings.max_new_tokens,
                    eos_token_id=settings.eos_token_id, seed=settings.seed, collect_features=settings.collect_features,
                    tools=tools, sandbox=sandbox)
    ids = engine.add(prompts)
    mode = "decode" if drafter is None else "spec_decode"
    while engine.running or engine.paused:
        if engine.paused:
            if not engine.running:
                engine.wait_tools()
            engine.resume()
        if engine.running:
            engine.step(mode, settings.strategy)
    finished = [engine.finished[i] for i in ids]
    return Generation([f.tokens for f in finished], engine.iterations, finished)

