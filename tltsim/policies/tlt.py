"""TLT and its ablations as simulator policies, composed from the policy objects in tltsim.control.

One class, `TLTPolicy`, configured by `TLTKnobs`, covers every named variant:

    tlt            adaptive SD + BEG tuner + a drafter spot-trained on idle workers
    tlt-base       adaptive SD with a model-free n-gram drafter, no training
    static-sd      adaptive SD with a drafter trained once (it goes stale as the policy moves)
    sd-always      SD from the first token, a drafter spot-trained as tlt's
    tlt-auto       tlt whose switch point is learned per batch bucket (tltsim.control.learned), starting from the
                   cost model's estimate of where speculation pays
    tlt-dedicated  adaptive SD; `dedicated_gpus` GPUs reserved to train the drafter instead of idle ones
    das            adaptive SD with history drafting (DAS, SuffixDecoding): drafts from the prompt, its siblings and
                   its earlier responses, no drafter to train or run, a lookup each speculative iteration
    das+tlt        adaptive SD with the hybrid: per request the better of history drafting and tlt's drafter
                   (trained on idle workers, its forwards paid every speculative iteration), plus the lookup
    cotrain        adaptive SD with a drafter co-trained inside the actor update (verl's MTP `enable_train`): its
                   quality restored every step, its training paid in the update phase (its forward and backward over
                   the step's tokens at the cost model's drafter-training throughput on every GPU)

The drafter is a method (knob `drafter`, tltsim.drafter.methods: what drafting costs) and a training (knob
`training`). A trained method, its starting quality and drift are the config's `drafter` section (a calibration
to a run that speculated sets it) wherever the knobs do not give them; a hybrid's trained part is the config's
method; an n-gram drafter takes the config's quality where the config's method is ngram (a run that drafted so).

Per step: each engine's EngineControl begins a rollout (its switch starts over;
its tuner and guard keep what they learned across steps); the drafter's quality is the same for every
engine, except a history drafter's (das, das+tlt), which is per engine the tokens-weighted mean over its
requests of each one's history quality (tltsim.drafter.history_quality). When the rollout ends, the spot
trainer's spans become drafter training samples (throughput from the cost model, minus load and checkpoint
costs), the drafter trains on them, then drifts with the policy update.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, replace

import numpy as np

from tltsim.control import CHECKPOINT_S, parse_arms
from tltsim.control.decisions import VARIANTS as DECISION_VARIANTS
from tltsim.control.decisions import DecisionKnobs
from tltsim.control.knobs import build, knob, knob_names
from tltsim.control.learned import learned_summary, prior_from
from tltsim.core.errors import TltsimError
from tltsim.drafter.acceptance import AcceptanceModel
from tltsim.core.drafter_names import TRAINED
from tltsim.drafter.methods import METHODS
from tltsim.drafter.quality import DrafterConfig, DrafterQuality, NgramDrafter
from tltsim.sim.speculation import Speculation, speculative_iteration_time
from tltsim.drafter.history_quality import (LOOKUP_FRACTION, ChainAcceptance, HistoryDrafter, HistoryQuality, hybrid,
                                        weighted_mean)
from tltsim.sim.hooks import Policy, StepOutcome

@dataclass(frozen=True)
class TLTKnobs(DecisionKnobs):
    """The decision knobs (tltsim.control.decisions) and the simulator's own: its model of the drafter and of
    spot training, and its fast path's chunking."""

    dedicated_gpus: int = knob(0, lo=-1)  # GPUs reserved for drafter training all step (tlt-dedicated; the drafter
    # spot-trains there, not on idle workers); a multiple of tp, or -1: one engine's worth (tp GPUs)
    drift: float = knob(DrafterConfig.drift)  # drafter quality lost per policy update
    tau_samples: float = knob(DrafterConfig.tau_samples)  # samples that close 63% of the quality gap
    q_start: float = knob(DrafterConfig.q_start)  # drafter quality when RL starts
    q_max: float = knob(DrafterConfig.q_max)  # best quality training reaches (learning-curve asymptote; >= q_start
    # used)
    load_s: float = knob(DrafterConfig.load_s)  # seconds to load the drafter and its optimizer when training starts
    checkpoint_s: float = knob(CHECKPOINT_S, lo=0.0)  # seconds of a training span spent saving the drafter when
    # preempted
    chunk_iters: int = knob(32, lo=1)  # fast path: speculative iterations per tuner decision
    lookup_fraction: float = knob(LOOKUP_FRACTION, lo=0.0)  # history drafting (das, das+tlt): its index lookup and
    # catch-up per speculative iteration, as a share of the verify forward's time (tltsim.drafter.history_quality)
    history_repeats: bool = knob(False)  # history drafting: a prompt_id's responses of earlier steps are its history
    # too (only for a trace whose prompt_id names one prompt across steps: the schema's numbers prompts within a step)
    drafter_batch: int = knob(0, lo=0)  # sequences a spot-training batch: a trainer stops at the end of the batch
    # in progress when the rollout ends, which holds the next stage back (0: it stops at once)


# name -> knob defaults that differ from TLTKnobs()
VARIANTS = {
    **DECISION_VARIANTS,
    "tlt-dedicated": {"dedicated_gpus": -1},  # -1: one engine's worth (tp GPUs), set in bind; spot training there
    "cotrain": {"training": "cotrain"},  # quality restored every step, at the update phase's cost
}
KNOB_NAMES = knob_names(TLTKnobs)


class TLTPolicy(Policy):
    """Speculative rollout with a drafter-quality model; see the module docstring for the variants."""

    knob_names = KNOB_NAMES

    @property
    def trains_drafter(self) -> bool:
        """Whether workers handed to the spot trainer (worker_done) train the drafter: spot training on idle
        workers, not on dedicated ones."""
        return self.k.spot and not self.dedicated

    def __init__(self, name: str = "tlt", **knobs):
        knobs = TLTKnobs.renamed(name, knobs, VARIANTS[name])  # the older knobs, read against the variant's
        preset = {**VARIANTS[name], **knobs}
        if "arms" in preset:
            preset["arms"] = tuple(str(a) for a in parse_arms(preset["arms"]))
        self.name = name
        self._given = set(knobs)
        self._dedicated_default = preset.get("dedicated_gpus") == -1
        if self._dedicated_default:
            preset["dedicated_gpus"] = 0  # placeholder until bind knows tp
        self.k = build(TLTKnobs, name, preset)
        self.dedicated = self._dedicated_default or self.k.dedicated_gpus > 0
        if self.dedicated and self.k.training != "spot":
            raise TltsimError(f"policy {name!r}: dedicated_gpus keeps GPUs to spot-train the drafter on, which "
                              f"training = {self.k.training!r} does not; give training=spot or dedicated_gpus=0")
        self.knob_values = asdict(self.k)

    # --- set-up ------------------------------------------------------------------------------
    def reserved_gpus(self, cluster) -> int:
        k = cluster.tp if self._dedicated_default else self.k.dedicated_gpus
        if k % cluster.tp or k >= cluster.gpus:
            raise TltsimError(
                f"policy {self.name!r}: dedicated_gpus = {k} must be a multiple of tp = {cluster.tp} "
                f"and leave at least one engine of the {cluster.gpus} GPUs for rollout"
            )
        return k

    def bind(self, sim) -> None:
        super().bind(sim)
        seed = sim.cfg.seed
        world = sim.cfg.drafter
        trained_world = world.method in TRAINED
        world_knobs = dict(zip(("q_start", "drift"), world.trained()))  # where the knobs do not give them
        self.k = replace(self.k, **{n: v for n, v in world_knobs.items() if n not in self._given})
        if trained_world and "drafter" not in self._given and self.k.drafter in TRAINED:
            self.k = replace(self.k, drafter=world.method)
        self.knob_values = asdict(self.k)
        k = self.k
        # what drafting costs: the method's, a hybrid's trained part's
        self.method = METHODS[k.drafter if k.drafter != "hybrid" else world.method if trained_world else "eagle"]
        self.acceptance = AcceptanceModel()
        cfg = DrafterConfig(q_start=k.q_start, q_max=max(k.q_start, k.q_max), drift=k.drift, load_s=k.load_s,
                            q_floor=min(DrafterConfig.q_floor, k.q_start), tau_samples=k.tau_samples)
        history = k.drafter in ("suffix", "hybrid")
        self.history = HistoryQuality() if history else None
        self.lookup_fraction = k.lookup_fraction if history else 0.0
        self.earlier: Counter = Counter()  # prompt_id -> its responses finished in earlier steps (history drafting)
        self.row_quality = None  # the step's rows' history qualities (prepare_step)
        if k.drafter == "ngram":
            self.drafter = NgramDrafter(world.q_start) if world.method == "ngram" else NgramDrafter()
        elif k.drafter == "suffix":
            self.drafter = HistoryDrafter(self.history)
            self.acceptance = ChainAcceptance()
        else:
            self.drafter = DrafterQuality(cfg, trainable=k.spot)
        df = sim.trace.df
        per_request_ctx = float(df["prompt_len"].mean() + df["response_len"].mean() / 2)
        cost = sim.cost
        expected = lambda s, b: self._expected_reward(cost, s, b, b * per_request_ctx)  # noqa: E731 (tuner oracle)
        self.controls = [k.control(e, seed, expected) for e in range(sim.engines)]
        if k.sd == "learned":  # start from the cost model's estimate, so no rollout pays to explore it all
            prior = self._prior(cost, per_request_ctx, self.controls[0].tuner, df)
            self.controls = [k.control(e, seed, expected, prior) for e in range(sim.engines)]
        self.rngs = [np.random.default_rng([seed, e]) for e in range(sim.engines)]
        self.workers = sim.engines + sim.reserved_workers
        self.trainer = k.trainer(self.workers, idle=not self.dedicated)
        self.buffer = k.buffer()
        self.data_version = -1  # inside an asynchronous run: the newest version whose responses the buffer holds

    def _prior(self, cost, per_request_ctx: float, tuner, df) -> dict:
        """The learned switch's prior: per bucket, the cost model's plain and speculative tokens per second (the
        best arm the tuner may pick there, at this drafter's quality), up to the largest batch an engine runs."""
        per_engine = -(-int(df.groupby("step").size().max()) // self.sim.engines)
        candidates = getattr(tuner, "candidates", lambda b: tuner.arms)

        def plain(b):
            return b / float(cost.decode_time(b, b * per_request_ctx))

        def spec(b):
            return max(self._expected_reward(cost, s, b, b * per_request_ctx) for s in candidates(b))

        return prior_from(plain, spec, min(self.sim.cfg.cluster.max_running, per_engine))

    def summary(self) -> dict:
        """For sd "learned" (tlt-auto): what the switches learned by the run's end: the threshold most engines
        learned, the smallest of a tie (`sd_threshold`), and the batch buckets where most engines speculate
        (`sd_buckets`)."""
        if self.k.sd != "learned":
            return {}
        return learned_summary([c.switch for c in self.controls])

    def _expected_reward(self, cost, s, b, ctx) -> float:
        acc = self.acceptance.mean(s, self.drafter.quality)
        return acc * b / speculative_iteration_time(cost, b, s, ctx, self.drafter.model_free, self.lookup_fraction,
                                                    self.method)

    # --- hooks -------------------------------------------------------------------------------
    def prepare_step(self, step: int, df: dict) -> dict:
        """A history drafter's quality for each of the step's rows, from its group and its prompt's earlier
        responses (tltsim.drafter.history_quality); the rows themselves unchanged."""
        if self.history is not None:
            earlier = np.array([self.earlier[p] if self.k.history_repeats else 0 for p in df["prompt_id"].tolist()],
                               float)
            self.row_quality = self.history.of_step(df.get("group", df["prompt_id"]), df["response_len"], earlier)
            self.row_tokens = np.asarray(df["response_len"], float)
        return df

    def begin_step(self, step: int, t: float) -> None:
        self.step = step
        self.t0 = t
        self.quality_now = self.drafter.quality
        self.trainer.start_rollout(step, t)
        self.train_start: dict[int, float] = {}
        for c in self.controls:
            c.begin_rollout()
        # dedicated workers are never BUSY with rollout: they finish at once and train all rollout
        for w in range(self.sim.engines, self.workers):
            self.trainer.worker_done(w, t)
        if self.sim.reserved_workers:
            for w in range(self.sim.engines, self.workers):
                self.train_start[w] = t

    def speculation(self, engine: int, rows=None):
        return Speculation(
            control=self.controls[engine],
            acceptance=self.acceptance,
            quality=self._quality(rows),
            chunk_iters=self.k.chunk_iters,
            rng=self.rngs[engine],
            model_free=self.drafter.model_free,
            lookup_fraction=self.lookup_fraction,
            method=self.method,
        )

    def _quality(self, rows=None) -> float:
        """The drafter's quality for an engine running `rows` of the step (None: all of them): the drafter's, or
        with a history drafter the tokens-weighted mean over the rows of each one's quality (das+tlt: the better
        of its history quality and the trained drafter's)."""
        if self.history is None or self.row_quality is None:
            return self.quality_now
        rows = slice(None) if rows is None else np.asarray(rows)
        q = self.row_quality[rows]
        if self.k.drafter == "hybrid":
            q = hybrid(q, self.quality_now)
        mean = weighted_mean(q, self.row_tokens[rows])
        return self.quality_now if math.isnan(mean) else mean

    def _stop_time(self, start: float, t: float, load: float, seq_len: float, tokens_per_s: float) -> float:
        """When a trainer that started at `start` (loading the drafter for `load` s, then batches of
        `drafter_batch` sequences of `seq_len` tokens, prompt included, as the drafter's training throughput
        counts them) is free after being told at `t` to stop: at `t` while loading or with drafter_batch 0,
        else at the end of the batch in progress."""
        batch_s = self.k.drafter_batch * max(seq_len, 1.0) / tokens_per_s if tokens_per_s > 0 else 0.0
        trained = t - start - load
        if batch_s <= 0 or trained <= 0:
            return t
        return start + load + math.ceil(trained / batch_s) * batch_s

    def worker_done(self, engine: int, t: float) -> None:
        for w in self.trainer.worker_done(engine, t):
            self.train_start.setdefault(w, t)

    def _train_in_tool_waits(self, sr, load: float) -> tuple[float, float]:
        """Multi-turn rollouts: the drafter trains while an engine's trajectories all wait on tools, from the
        wait's start until the first answer preempts it (loading the drafter, then saving it, within the wait):
        each wait longer than load_s + checkpoint_s becomes a drafter_train interval. Returns (its seconds of
        training, the waits' whole seconds)."""
        useful = whole = 0.0
        for ro in sr.rollouts.values():
            for iv in ro.intervals:
                gap = iv.t_end - iv.t_start
                if iv.state == "tool_wait" and gap > load + self.k.checkpoint_s:
                    iv.state = "drafter_train"
                    useful += gap - load - self.k.checkpoint_s
                    whole += gap
        return useful, whole

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        self.trainer.preempt(t)
        self.buffer.add(step, sr.generated[sr.generated > 0])  # the sequences whose hidden states the step made
        data = self.buffer.samples(step)
        tp = self.sim.cfg.cluster.tp
        per_worker_tps = float(self.sim.cost.drafter_train_tokens_per_s(tp))
        load = getattr(getattr(self.drafter, "config", None), "load_s", 0.0)
        seq_len = data.mean_length + (float(np.mean(df["prompt_len"])) if len(df["prompt_len"]) else 0.0)
        spans = {w: (a, self._stop_time(a, t, load, seq_len, per_worker_tps)) for w, a in self.train_start.items()
                 if t > a}
        useful = sum(max(0.0, (b - a) - load - self.k.checkpoint_s) for a, b in spans.values())
        gap_useful, gap_s = self._train_in_tool_waits(sr, load) if self.trains_drafter else (0.0, 0.0)
        useful += gap_useful
        samples = self._train(useful, data)
        quality_trained = self.drafter.quality
        self.drafter.policy_update()
        update_s = self._cotrain(df, sr) if self.k.training == "cotrain" else 0.0
        quality_used = self._quality()
        if self.history is not None:  # the step's finished responses join their prompts' history
            done = sr.finished & (np.asarray(df["response_len"]) > 0)
            self.earlier.update(np.asarray(df["prompt_id"])[done].tolist())
        return StepOutcome(
            spans={w: ("drafter_train", a, b) for w, (a, b) in spans.items()},
            release_s=max((b - t for _, b in spans.values()), default=0.0),
            columns={
                "drafter_quality": quality_used,
                "drafter_quality_trained": quality_trained,
                "drafter_train_gpu_s": (sum(b - a for a, b in spans.values()) + gap_s) * tp,
                "drafter_train_samples": samples,
                **({"drafter_train_in_update_s": update_s} if self.k.training == "cotrain" else {}),
            },
            train_s=update_s,
        )

    # --- inside an asynchronous run (tltsim.sim.async_loop) -------------------------------------
    def loop_refusal(self) -> str | None:
        k = self.k
        if k.training == "cotrain":
            return "its drafter trains inside the actor update"
        if self.dedicated:
            return "it keeps GPUs for drafter training"
        if k.drafter in ("suffix", "hybrid"):
            return "its history drafting follows a synchronous step's prompt groups"
        return None

    def begin_version(self, version: int, t: float) -> None:
        """Every engine's switch starts over under the new weights; the version's drafter is the drafter now."""
        self.version_quality = self.quality_now = self.drafter.quality
        self.version_trained = [0.0, 0.0]  # GPU-seconds of drafter training, and the samples it trained on
        for c in self.controls:
            c.begin_rollout()

    def idle_training(self, seconds: float) -> float:
        """A wait of `seconds` trains the drafter (spot training) where it is long enough to load it and save it
        again, on the buffer's newest step's samples at the cost model's throughput; it serves from then on."""
        load = getattr(getattr(self.drafter, "config", None), "load_s", 0.0)
        useful = seconds - load - self.k.checkpoint_s
        if not self.trains_drafter or useful <= 0:
            return 0.0
        samples = self._train(useful, self.buffer.samples(self.data_version))
        self.quality_now = self.drafter.quality
        self.version_trained[0] += seconds * self.sim.cfg.cluster.tp
        self.version_trained[1] += samples
        return useful

    def end_version(self, version: int, lengths: np.ndarray) -> dict:
        """The step's responses join the drafter's data; the drafter drifts with the policy update."""
        self.buffer.add(version, lengths)
        self.data_version = version
        trained = self.drafter.quality
        self.drafter.policy_update()
        gpu_s, samples = self.version_trained
        return {"drafter_quality": self.version_quality, "drafter_quality_trained": trained,
                "drafter_train_gpu_s": gpu_s, "drafter_train_samples": samples}

    def _train(self, useful_s: float, data) -> float:
        """The drafter trained for `useful_s` seconds of one worker's training (the cost model's drafter-training
        throughput on a TP group) on `data` (the buffer's TrainingData): the samples it trained on."""
        tokens = useful_s * float(self.sim.cost.drafter_train_tokens_per_s(self.sim.cfg.cluster.tp))
        samples = tokens / max(data.mean_length, 1.0) if data.num_samples else 0.0
        if getattr(self.drafter, "trainable", False) and samples > 0:
            self.drafter.train(samples)
        return samples

    def _cotrain(self, df: dict, sr) -> float:
        """The drafter trained inside the actor update on the step's finished sequences: its quality back at its
        best (q_max) for the next rollout, and the seconds its forward and backward over their tokens add to the
        update (every GPU at the cost model's drafter-training throughput)."""
        done = sr.finished & (np.asarray(df["response_len"]) > 0)
        tokens = float((np.asarray(df["prompt_len"]) + np.asarray(df["response_len"]))[done].sum())
        self.drafter.quality = self.drafter.config.q_max
        gpus = self.sim.cfg.cluster.gpus
        return tokens / float(self.sim.cost.drafter_train_tokens_per_s(gpus)) if tokens else 0.0


def variant_factory(name: str):
    def make(**knobs) -> TLTPolicy:
        return TLTPolicy(name, **knobs)

    make.knob_names = KNOB_NAMES
    make.Knobs, make.defaults = TLTKnobs, VARIANTS[name]  # what `tltsim policies` lists
    make.__doc__ = f"{name}: TLT variant ({VARIANTS[name] or 'defaults'})"
    return make

