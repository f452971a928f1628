"""What every column of a comparison (and every key of a run's summary) means: the one place that says it.

The HTML report's glossary, `tltsim compare --help` (its epilog) and docs/glossary.md are all
made from COLUMNS, so they use the same words:

    COLUMNS["idle_fraction"]      the definition, one sentence
    BOUNDS["ideal"]               what a bound bounds (a run that is not a realisable policy)
    RANKING[name]                 the columns of the report's ranking that are not summary keys
    DEFINITIONS[key]              any of them, or a key of a run's summary only
    TRACE_STATS[column]           the columns of `tltsim trace stats` (and its --json keys)
    DRAFTERS[name]                a drafter's method or training (the knobs `drafter` and `training`)
    epilog()                      the plain-text glossary of compare --help
    trace_stats_epilog()          the plain-text glossary of trace stats --help
    markdown()                    docs/glossary.md (tests check it holds it verbatim)

Times are seconds summed over a run's steps unless a definition says otherwise; "GPU-seconds"
count each GPU of the cluster (a TP group of 4 idle for 1 s is 4 GPU-seconds).
"""
from __future__ import annotations

import textwrap

# Columns of the comparison tables (the report's and compare's), in the report's order.
COLUMNS: dict[str, str] = {
    "run": "a row of the tables: one execution of the trace and cluster, labelled by its policy (a second run of "
           "a policy gets #2, #3); the first run is the baseline speedups are measured against.",
    "policy": "the decision rules a run executed: what to admit, when to speculate, where the drafter trains, when "
              "a step ends (`--policy`; `tltsim simulate --help` lists verl, tlt, ...).",
    "speedup": "baseline makespan_s / this run's makespan_s: how many times faster the whole run is "
               "end to end (above 1 is faster).",
    "makespan_s": "wall-clock seconds from the first step's start to the last step's end.",
    "mean_step_s": "makespan_s / steps: wall-clock seconds per RL step.",
    "saved_per_step_s": "the baseline's mean_step_s - this run's (compare --calibration, and the ranking of a "
                        "calibrated report): seconds a step would save on the calibrated cluster.",
    "rollout_s": "seconds the steps spent waiting for rollout (generating responses); for a policy that "
                 "overlaps rollout with training (async) only the time training waited for responses, "
                 "so it is not comparable with the others.",
    "mean_rollout_s": "rollout_s / steps: seconds a step waited for rollout (the table of `tltsim compare` shows "
                      "this beside mean_step_s, both a step's).",
    "rollout_share": "rollout_s / makespan_s: the share of the run spent in rollout.",
    "tail_share": "share of rollout_s after 90% of a step's responses had finished: the long tail.",
    "tokens_per_s": "response tokens generated / makespan_s.",
    "idle_fraction": "idle_gpu_seconds / gpu_seconds: the share of GPU time with nothing to do (engines "
                     "that finished early waiting for the tail); GPUs training the drafter are busy, not idle.",
    "idle_gpu_seconds": "GPU-seconds with nothing to do, summed over the cluster's GPUs.",
    "sd_share": "share of the rollout engines' time spent in speculative decoding (0: never speculated).",
    "mean_accepted": "tokens each speculative verify step produced, on average (accepted draft tokens "
                     "plus the target's own); blank when the run never speculated.",
    "drafter_train_gpu_seconds": "GPU-seconds spent training the drafter: idle rollout GPUs (tlt's spot "
                                 "trainer, and das+tlt's for the trained half of its hybrid) or GPUs set aside for "
                                 "it (tlt-dedicated); 0 for a drafter with nothing to train (tlt-base's n-gram, "
                                 "das's history drafting, which drafts from the prompt's sibling responses).",
    "staleness_mean": "policy versions between the weights that began a trained response and the weights "
                      "it trains, averaged over trained responses: 0 is on-policy.",
    "staleness_max": "the largest staleness of any trained response.",
    "resumed_fraction": "share of trained responses generated under more than one policy version "
                        "(interrupted or carried into a later step, then continued).",
    "dropped_fraction": "share of generated responses thrown away (aborted, or too stale when finished) "
                        "instead of trained.",
    "trained_len_ratio": "mean length of the responses trained on / mean length of the trace's responses: "
                         "1 unless the policy changed the sample mix (below 1: shorter responses favoured).",
    "turns_per_trajectory": "runs of a multi-turn trace: model turns per trajectory, on average (a trajectory "
                            "calls a tool between two turns).",
    "tool_wait_share": "runs of a multi-turn trace: the share of the rollout engines' time (engines x rollout_s) "
                       "in which every trajectory an engine held waited on a tool call, so it had nothing to "
                       "generate: idle, or training the drafter where the policy does (tlt).",
}

# Keys of a run's summary that no comparison table shows (the report's per-run tables do).
SUMMARY_ONLY: dict[str, str] = {
    "steps": "RL steps simulated (or run).",
    "reward_s": "seconds in the reward stage (reward and log-prob forwards).",
    "train_s": "seconds in the policy update.",
    "sync_s": "seconds broadcasting new weights to the rollout engines.",
    "gpu_seconds": "GPUs x makespan_s: all GPU time of the run.",
    "busy_gpu_seconds": "gpu_seconds - idle_gpu_seconds: GPU time doing anything (drafter training included).",
    "staleness_counts": "trained responses per staleness (policy versions behind).",
    "trace": "where the run's response lengths came from.",
    "mean_reward": "real runs: mean reward of the trained responses.",
    "drafter_accepted": "real runs: the drafter's mean accepted length on held-out probe prompts, per step.",
    "drafter_warmup_s": "real runs: seconds spent fitting the drafter before the first step.",
    "drafter": "real runs: the drafter its engines drafted with: eagle (trained), suffix (the rollout's history, "
               "das) or hybrid (history where sure, else the trained one, das+tlt).",
    "history_share": "real das+tlt runs: share of the rows drafted that drew from the history, not the trained "
                     "drafter.",
    "sd_threshold": "tlt-auto: the switch threshold its engines learned by the run's end (the one most engines "
                    "hold): the largest running batch at which speculating measured (or, before it was measured, "
                    "the cost model estimated) faster than plain decoding; tlt's is fixed (32 by default).",
    "sd_buckets": "tlt-auto: the batch-size buckets (1, 2-3, 4-7, ...) where most of its engines speculate by the "
                  "run's end, because there speculation's accepted tokens per second beat plain decoding's.",
}

# A run's per-step columns about its drafter (steps.parquet; the simulator's policies and `tltsim real run` write them).
STEP_DRAFTER: dict[str, str] = {
    "drafter_quality": "the drafter's quality q (top-1 acceptance at the first drafted position) the step's rollout "
                       "drafted with.",
    "drafter_quality_trained": "q after the step's drafter training, before the policy update's drift.",
    "drafter_train_gpu_s": "GPU-seconds the step spent training the drafter on idle rollout GPUs (and in tool "
                           "waits).",
    "drafter_train_samples": "sequences the drafter trained on in the step (a real run: drafter_train_batches x "
                             "drafter_batch).",
    "drafter_train_in_update_s": "cotrain only: seconds the drafter's training added to the actor update (its "
                                 "forward and backward over the step's finished sequences on every GPU); "
                                 "part of train_s.",
    "drafter_train_batches": "real runs: drafter training batches in the step.",
    "drafter_accepted": SUMMARY_ONLY["drafter_accepted"],
    "static_drafter_accepted": "real runs with --probe-static: the accepted length of the drafter the run started "
                               "from, never trained, on the same probe prompts with the current target.",
}

# Columns of the report's ranking that are not summary keys.
RANKING: dict[str, str] = {
    "rollout speedup": "baseline rollout_s / this run's rollout_s; not comparable where rollout runs beside "
                       "training (rollout_s is then only the wait for responses).",
    "off-policy cost": "what the speed costs the training data: staleness, resumed and dropped responses, and a "
                       "changed length mix (trained_len_ratio); none for an on-policy run: every trained response "
                       "generated whole by the weights that train on it, and no generated response dropped.",
    "checked against a run": "how far the simulator's predicted speedup over verl was from the measured one on "
                             "pairs of real runs of the policy (tltsim validate, at one machine speed; the shipped "
                             "pairs, benchmarks/bench_checked.py, and those given with --validated); not yet where "
                             "no real run of it has been checked.",
}

DEFINITIONS: dict[str, str] = {**COLUMNS, **SUMMARY_ONLY, **RANKING}

# Every policy `--policy` / `--policies` takes, in one line (`tltsim policies` lists them with their knobs).
POLICIES: dict[str, str] = {
    "verl": "the baseline: synchronous rollout, every response decoded plainly, the step waits for its longest.",
    "tlt": "TLT: a drafter spot-trained on idle GPUs; speculative decoding, a bandit-chosen strategy, once an "
           "engine's running batch falls to the threshold.",
    "tlt-base": "verl with model-free n-gram (prompt-lookup) speculation, switched on as TLT's; no drafter trained.",
    "static-sd": "TLT's switch and tuner with a drafter that is never retrained (its accepted length drifts).",
    "sd-always": "TLT with speculation from the first token, whatever the batch.",
    "tlt-auto": "TLT with a switch threshold learned per batch size from the engine's own measurements.",
    "das": "speculation from a history of the prompt's earlier responses (DAS: suffix drafting); no drafter trained.",
    "das+tlt": "TLT whose drafter is the hybrid of the spot-trained drafter and the history's suffix drafting.",
    "tlt-dedicated": "TLT with GPUs set aside to train the drafter all step instead of on idle ones.",
    "cotrain": "a drafter trained inside the actor update each step (quality restored, at the update's cost).",
    "ideal": "a bound, not a policy: each step's rollout as long as its longest response alone.",
    "partial": "partial rollout (APRIL): ratio x the groups launched, the step ends once enough finish, the rest "
               "carried with their tokens into the next step.",
    "tail-batching": "tail batching (RollPacker): eta x the groups in a short round, the rest aborted and their "
                     "prompts parked for a long round.",
    "longest-first": "groups placed on engines and admitted longest predicted first (a history predictor, LPT).",
    "migrate": "tail migration (RLHFuse): once few responses remain they move onto fewer engines; the rest are "
               "released to the next stage.",
    "async": "asynchronous RL (AReaL): rollout engines and a trainer apart, samples up to max_staleness versions old; "
             "its engines speculate with a policy that only speculates (async+tlt, async+sd-always, async+tlt-auto).",
    "partial+tlt": "partial rollout with TLT's speculation and spot-trained drafter.",
    "tail-batching+tlt": "tail batching with TLT's speculation and spot-trained drafter.",
    "longest-first+tlt": "longest-first placement with TLT's speculation and spot-trained drafter.",
    "migrate+tlt": "tail migration whose released engines train TLT's drafter (release = drafter).",
}

# Runs that are not realisable policies but bounds, and what they bound.
BOUNDS: dict[str, str] = {
    "ideal": "each step's rollout as long as the longest of its responses decoded alone on one engine "
             "(its prefill, then a token an iteration) or, if longer, its tokens decoded at the cluster's best "
             "throughput (full batches spread evenly over the engines): a lower bound on every step's rollout_s "
             "under plain synchronous decoding of this trace on this cluster (no speculation, every response "
             "of the step decoded whole in it). A policy that carries responses across steps (partial rollout, "
             "tail batching) can beat it in a step, as a resumed response decodes only its remaining tokens "
             "there; the same two times computed on the work the step did (the requests frame's rows it "
             "finished: response_len the tokens decoded in the step, prompt_len the prompt with the tokens "
             "carried in) bound its steps. It does not bound a policy that speculates, nor async RL (rollout "
             "beside training), and its makespan does not bound a run that starts the reward stage before the "
             "rollout ends (migrate's release = next-stage).",
}

# A drafter's two names (tltsim.core.drafter_names): its method (the knob `drafter`), then its training (`training`).
DRAFTERS: dict[str, str] = {
    "eagle": "method: an EAGLE-1/2 head, one decoder layer on the target's last hidden state (TLT's drafter; real/'s "
             "trained drafter).",
    "eagle3": "method: an EAGLE-3 head, one decoder layer on three of the target's layers.",
    "mtp": "method: the target's own multi-token-prediction heads (verl's actor_rollout_ref.model.mtp).",
    "draft_model": "method: a small model of the target's family (vLLM draft_model, SGLang STANDALONE).",
    "dflash": "method: verl-SpeCo's DFlash block drafter, one forward proposing the whole block.",
    "dspark": "method: verl-SpeCo's DSpark block drafter, one forward proposing the whole block.",
    "ngram": "method: prompt lookup, what followed the row's last tokens where they appeared before; no weights "
             "(tlt-base).",
    "suffix": "method: the prompt, its sibling responses and earlier responses in a suffix tree (SuffixDecoding, "
              "DAS); no weights (das).",
    "hybrid": "method: per request suffix where its match is long and confident, else a trained method (das+tlt).",
    "spot": "training: on GPUs idle in the rollout's tail (TLT), or on GPUs kept for it (tlt-dedicated).",
    "cotrain": "training: inside the actor update, on the step's batch (verl's MTP enable_train; the cotrain "
               "policy).",
    "periodic": "training: every few RL steps (verl-SpeCo's training_interval_steps); read from runs, not simulated.",
    "frozen": "training: never during RL; it goes stale as the policy moves (static-sd).",
}

# Columns of `tltsim trace stats`'s table, as it heads them, with the --json key each comes from.
TRACE_STATS: dict[str, str] = {
    "step": "the RL step; `all` pools every response of the trace.",
    "responses": "requests of the step, aborted ones included (--json: responses). The length figures (mean to "
                 "tail%, and trunc%) are those of the responses not aborted: an aborted request produced nothing.",
    "mean": "mean response length in tokens (--json: mean).",
    "median": "median response length in tokens, linearly interpolated (--json: median).",
    "p90": "90th percentile of response length, linearly interpolated (--json: p90).",
    "p99": "99th percentile of response length, linearly interpolated (--json: p99).",
    "max": "the longest response in tokens: a synchronous step waits for it (--json: max).",
    "max/med": "max / median: how much longer the longest response is than the typical one (--json: "
               "max_over_median).",
    "trunc%": "percent of responses cut at the generation cap (unfinished), `-` where the trace says neither "
              "(--json: truncated_fraction, a fraction).",
    "tail%": "percent of the step's makespan (one slot a response, all starting together, a token a unit of time) "
             "spent after 90% of its responses finished: (max - t90) / max, t90 the ceil(0.9 n)-th shortest "
             "length; for `all`, summed over steps (--json: tail_share, a fraction).",
    "aborted%": "percent of the step's requests aborted (verl's rollout dump writes them as an empty output; the "
                "trace marks them `aborted`), 0 where the trace has no such column (--json: aborted_fraction, a "
                "fraction).",
    "trajectories": "multi-turn traces only, in a second table with the columns below: trajectories in the step, "
                    "one a row of the trace (--json: trajectories).",
    "turns": "the trajectories' model turns: each generates tokens, then calls a tool or ends the trajectory "
             "(--json: turns).",
    "tool_calls": "turns followed by a tool call; a turn's several calls, where a log records them, count once "
                  "(--json: tool_calls).",
    "completion_tokens": "tokens the model generated, all turns; the tools' answers are not counted (--json: "
                         "completion_tokens).",
    "tool_latency_s": "seconds the tool calls took, summed over them (--json: tool_latency_s).",
    "tool_wait%": "percent of the trajectories' own time spent waiting for tools: tool_latency_s / (tool_latency_s "
                  "+ the turns' generation seconds); `-` where the trace does not record generation seconds "
                  "(turn_gen_s; a synthetic trace does not) (--json: tool_wait_share, a fraction, null there).",
}

_WIDTH = 100


def epilog() -> str:
    """The glossary as plain text for `tltsim compare --help` (one wrapped entry per column, then the bounds)."""
    lines = ["columns of the comparison table:"]
    lines += _entries(COLUMNS)
    lines += ["", "bounds (runs that are not realisable policies):"]
    lines += _entries(BOUNDS)
    return "\n".join(lines)


def trace_stats_epilog() -> str:
    """The columns of `tltsim trace stats` as plain text for its --help."""
    return "\n".join(["columns of the table:", *_entries(TRACE_STATS)])


def _entries(defs: dict[str, str]) -> list[str]:
    pad = max(map(len, defs)) + 4
    lines = []
    for name, text in defs.items():
        lines += textwrap.wrap(text, _WIDTH, initial_indent=f"  {name:<{pad - 2}}", subsequent_indent=" " * pad,
                               break_on_hyphens=False)  # next-stage stays one word
    return lines


def markdown() -> str:
    """The glossary as a Markdown list (docs/glossary.md's)."""
    out = [f"- `{name}`: {text}" for name, text in COLUMNS.items()]
    out += [f"- `{name}` (a bound, not a policy): {text}" for name, text in BOUNDS.items()]
    out += ["", "Drafters, in two names: the method (the knob `drafter`) and the training (the knob `training`):", ""]
    out += [f"- `{name}`: {text}" for name, text in DRAFTERS.items()]
    out += ["", "Drafter columns of a run's steps (steps.parquet):", ""]
    out += [f"- `{name}`: {text}" for name, text in STEP_DRAFTER.items()]
    out += ["", "Columns of `tltsim trace stats`:", ""]
    out += [f"- `{name}`: {text}" for name, text in TRACE_STATS.items()]
    return "\n".join(out)

