"""A verl run's config as cluster and rollout settings: `--verl-config CONFIG.yaml` (or the run's output folder).

Hydra keeps the run's composed config in `<output folder>/.hydra/config.yaml`. The keys read:

    trainer.n_gpus_per_node x trainer.nnodes              cluster.gpus (colocated: every GPU rolls out)
    actor_rollout_ref.rollout.tensor_model_parallel_size   cluster.tp
    actor_rollout_ref.rollout.gpu_memory_utilization       cost.mem_fraction (weights + KV cache share)
    actor_rollout_ref.rollout.max_num_seqs                 cluster.max_running (SGLang: max_running_requests)
    actor_rollout_ref.rollout.n                            group size: checked against the trace
    actor_rollout_ref.rollout.response_length              the cap: the trace's max_response_len if it has none
    data.train_batch_size                                  prompts per step: checked against the trace
    actor_rollout_ref.model.path                           cluster.model when its name starts with a preset's
    actor_rollout_ref.rollout.multi_turn.enable, .max_assistant_turns, .max_user_turns, .max_parallel_calls,
      .tool_config_path, .interaction_config_path, .format, and rollout.agent.default_agent_loop
                                                           VerlConfig.multi_turn (MultiTurn): checked against the
                                                           trace; enable with neither config named is refused

Hydra saves the config unresolved, so values may be interpolations (`${data.max_response_length}`,
`${oc.select:data.max_response_length,512}`, relative `${.key}`): OmegaConf, the library Hydra is built on,
resolves them; one that cannot be resolved is reported. A key that is absent is left to the
defaults and flags. The GPU type is not in a verl config: pass --gpu (without it the CLI assumes the
default and says so in a note, recorded as cluster.gpu_assumed).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tltsim.core.errors import TltsimError
from tltsim.hardware import preset_names
from tltsim.core.config_files import read_config
from tltsim.trace import Trace, TraceMeta

ROLLOUT = "actor_rollout_ref.rollout"
MAX_NODES = 100_000  # values a config may expand to (verl's have about a thousand)


@dataclass(frozen=True)
class VerlConfig:
    """The settings a verl config gives; None where it does not say."""

    path: str
    gpus: int | None = None
    tp: int | None = None
    mem_fraction: float | None = None
    max_running: int | None = None
    group_size: int | None = None
    response_length: int | None = None
    train_batch_size: int | None = None
    model_path: str | None = None
    multi_turn: "MultiTurn | None" = None  # actor_rollout_ref.rollout.multi_turn/agent, where the config has them

    @property
    def model(self) -> str | None:
        """The model preset whose name the model path's last part starts with (the longest such), or None."""
        if not self.model_path:
            return None
        name = Path(self.model_path.rstrip("/")).name.lower()
        match = [p for p in preset_names("models") if name.startswith(p)]
        return max(match, key=len) if match else None

    def overrides(self) -> dict:
        """Dotted SimConfig keys (tltsim.config.override) for the settings given."""
        return {"cluster.gpus": self.gpus, "cluster.tp": self.tp, "cost.mem_fraction": self.mem_fraction,
                "cluster.max_running": self.max_running, "cluster.model": self.model}

    def notes(self) -> list[str]:
        """What the config says that the simulation cannot take as is."""
        if self.model_path and self.model is None:
            return [f"{self.path}: the model {self.model_path} is not a preset ({', '.join(preset_names('models'))}); "
                    f"the simulation uses --model (or its default): pass the closest one"]
        return []

    def check_trace(self, trace: Trace) -> tuple[Trace, list[str]]:
        """The trace with the config's cap declared when it has none, and notes where the two disagree."""
        notes, m = [], trace.meta
        if self.group_size is not None and m.group_size != self.group_size:
            notes.append(f"{self.path}: {ROLLOUT}.n = {self.group_size} but the trace has groups of {m.group_size}; "
                         f"the trace may come from another run")
        prompts = trace.df.groupby("step")["prompt_id"].nunique()
        if self.train_batch_size is not None and (prompts != self.train_batch_size).any():
            notes.append(f"{self.path}: data.train_batch_size = {self.train_batch_size} but the trace has "
                         f"{int(prompts.min())}-{int(prompts.max())} prompts per step")
        if self.response_length is not None and m.max_response_len is None:
            longest = int(trace.df["response_len"].max())
            if longest > self.response_length:
                raise TltsimError(f"{self.path}: {ROLLOUT}.response_length = {self.response_length} but the trace has "
                                  f"a response of {longest} tokens; the config and the trace are not of one run")
            trace = Trace(trace.df, TraceMeta(**{**m.to_dict(), "max_response_len": self.response_length}))
        elif self.response_length is not None and m.max_response_len != self.response_length:
            notes.append(f"{self.path}: {ROLLOUT}.response_length = {self.response_length} but the trace's cap is "
                         f"{m.max_response_len}")
        if self.multi_turn is not None:
            notes += self.multi_turn.check_trace(trace, self.path)
        return trace, notes


def read_verl_config(path) -> VerlConfig:
    """Read a verl run's Hydra config (the .yaml file, or the output folder holding .hydra/config.yaml)."""
    import yaml

    path = _config_file(Path(path))
    try:
        root = yaml.safe_load(read_config(path, "verl config").decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TltsimError(f"{path}: not a readable YAML file ({first}); give the run's .hydra/config.yaml") from None
    if _nodes(root, MAX_NODES) > MAX_NODES:
        raise TltsimError(f"{path}: expands to more than {MAX_NODES:,} values (YAML aliases repeating aliases); "
                          f"a verl config has a few hundred: give the run's .hydra/config.yaml")
    if not isinstance(root, dict) or not any(k in root for k in ("trainer", "actor_rollout_ref")):
        raise TltsimError(f"{path}: no 'trainer' or 'actor_rollout_ref' section; give the .hydra/config.yaml of a "
                          f"verl PPO/GRPO run")
    for section in ("trainer", "actor_rollout_ref", "data"):
        if section in root and not isinstance(root[section], dict):
            raise TltsimError(f"{path}: {section} = {root[section]!r} is not a section (a mapping of keys); give "
                              f"the .hydra/config.yaml of a verl PPO/GRPO run")
    from omegaconf import OmegaConf

    get = _Reader(OmegaConf.create(root), path)
    per_node, nodes = get.whole("trainer.n_gpus_per_node"), get.whole("trainer.nnodes")
    return VerlConfig(
        path=str(path),
        gpus=per_node * nodes if per_node is not None and nodes is not None else per_node,
        tp=get.whole(f"{ROLLOUT}.tensor_model_parallel_size"),
        mem_fraction=get.fraction(f"{ROLLOUT}.gpu_memory_utilization"),
        max_running=get.whole(f"{ROLLOUT}.max_num_seqs"),
        group_size=get.whole(f"{ROLLOUT}.n"),
        response_length=get.whole(f"{ROLLOUT}.response_length"),
        train_batch_size=get.whole("data.train_batch_size"),
        model_path=get.text("actor_rollout_ref.model.path"),
        multi_turn=read_multi_turn(get),
    )


MULTI_TURN, AGENT = f"{ROLLOUT}.multi_turn", f"{ROLLOUT}.agent"


@dataclass(frozen=True)
class MultiTurn:
    """A run's multi-turn settings (verl/trainer/config/rollout/rollout.yaml: `multi_turn`, `agent`), as its
    tool agent loop (verl/experimental/agent_loop/tool_agent_loop.py) reads them; None where the config does not
    say. The tool config is a path on the machine that trained: named, not read."""

    enable: bool
    max_assistant_turns: int | None = None  # null: no limit
    max_user_turns: int | None = None  # null: no limit (tool rounds and interaction turns count as user turns)
    max_parallel_calls: int | None = None  # the tool calls of one assistant turn that run (together)
    tool_config_path: str | None = None
    interaction_config_path: str | None = None
    format: str | None = None  # the tool-call parser (hermes, ...)
    default_agent_loop: str | None = None  # agent.default_agent_loop: the loop of a sample whose data names none

    def check_trace(self, trace: Trace, path: str) -> list[str]:
        """Where a trace's trajectories and these settings disagree."""
        if not self.enable:
            return []
        if not trace.agentic:
            return [f"{path}: {MULTI_TURN}.enable is true but the trace is single-turn (a rollout dump records no turns): "
                    f"each trajectory is simulated as one response; for the turns give a multi-turn trace (a PolyTrace "
                    f"log, or `tltsim trace synth agentic`), docs/verl.md#a-tool-agent-loop-run"]
        most = int(max((len(t) for t in trace.df["turn_response_len"]), default=0))
        if self.max_assistant_turns is not None and most > self.max_assistant_turns:
            return [f"{path}: {MULTI_TURN}.max_assistant_turns = {self.max_assistant_turns} but the trace has a "
                    f"trajectory of {most} turns; the trace may come from another run"]
        return []


def read_multi_turn(get: "_Reader") -> MultiTurn | None:
    """The run's multi-turn settings, or None when its config has no multi_turn section (a verl from before it)."""
    if get.value(MULTI_TURN) is None:
        return None
    enable = get.value(f"{MULTI_TURN}.enable")
    if not isinstance(enable, bool):
        raise TltsimError(f"{get.path}: {MULTI_TURN}.enable = {enable!r} is not true or false; give the run's "
                          f".hydra/config.yaml as verl saved it")
    mt = MultiTurn(enable=enable, max_assistant_turns=get.whole(f"{MULTI_TURN}.max_assistant_turns"),
                   max_user_turns=get.whole(f"{MULTI_TURN}.max_user_turns"),
                   max_parallel_calls=get.whole(f"{MULTI_TURN}.max_parallel_calls"),
                   tool_config_path=get.text(f"{MULTI_TURN}.tool_config_path"),
                   interaction_config_path=get.text(f"{MULTI_TURN}.interaction_config_path"),
                   format=get.text(f"{MULTI_TURN}.format"), default_agent_loop=get.text(f"{AGENT}.default_agent_loop"))
    if enable and not (mt.tool_config_path or mt.interaction_config_path):
        raise TltsimError(f"{get.path}: {MULTI_TURN}.enable is true but {MULTI_TURN}.tool_config_path (and "
                          f".interaction_config_path) is null: a tool-agent-loop run names its tools' config; give the "
                          f"run's .hydra/config.yaml as it trained, or set enable false for a single-turn run")
    return mt


def _nodes(value, limit: int) -> int:
    """The values in `value` as written out (an alias counted every time it is used), counted up to just past `limit`."""
    count, stack = 0, [value]
    while stack and count <= limit:
        v = stack.pop()
        count += 1
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return count


def _config_file(path: Path) -> Path:
    if path.is_dir():
        for candidate in (path / ".hydra" / "config.yaml", path / "config.yaml"):
            if candidate.is_file():
                return candidate
        raise TltsimError(f"{path}: no .hydra/config.yaml in it; give a verl run's output folder or its config file")
    if not path.is_file():
        raise TltsimError(f"{path} does not exist; give a verl run's .hydra/config.yaml")
    return path


class _Reader:
    """Values by dotted key, interpolations resolved by OmegaConf (Hydra's own config library), types checked;
    None for an absent key or a null."""

    def __init__(self, root, path: Path):
        self.root, self.path = root, path

    def whole(self, key: str) -> int | None:
        v = self.value(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TltsimError(f"{self.path}: {key} = {v!r} is not a whole number >= 1")
        return v

    def fraction(self, key: str) -> float | None:
        v = self.value(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise TltsimError(f"{self.path}: {key} = {v!r} is not a fraction in (0, 1]")
        return float(v)

    def text(self, key: str) -> str | None:
        v = self.value(key)
        return None if v is None else str(v)

    def flag(self, key: str) -> bool | None:
        v = self.value(key)
        if v is None or isinstance(v, bool):
            return v
        raise TltsimError(f"{self.path}: {key} = {v!r} is not true or false")

    def value(self, key: str):
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            return OmegaConf.select(self.root, key, default=None)
        except OmegaConfBaseException as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise TltsimError(f"{self.path}: {key} cannot be resolved ({first}); write the value in place or pass "
                              f"the matching flag") from None


# --- the speculative settings of a run (actor_rollout_ref.model.mtp, or verl-SpeCo's rollout.drafter) --------------

MTP = "actor_rollout_ref.model.mtp"  # verl's MtpConfig (verl/workers/config/model.py)
SPECO = f"{ROLLOUT}.drafter"  # verl-SpeCo's drafter (verl_speco/config/speco_base.yaml)
VLLM_SPEC = f"{ROLLOUT}.engine_kwargs.vllm.speculative_config"  # overrides verl merges into vLLM's speculative_config
# a vLLM speculative_config method, an SGLang speculative_algorithm or a verl-SpeCo speculative_algorithm (lowered)
# -> the drafter's method (tltsim.drafter.methods)
METHOD_OF = {"mtp": "mtp", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "mimo_mtp": "mtp",
             "eagle": "eagle", "eagle1": "eagle", "eagle2": "eagle", "eagle3": "eagle3",
             "draft_model": "draft_model", "standalone": "draft_model", "ngram": "ngram", "suffix": "suffix",
             "dflash": "dflash", "dspark": "dspark", "domino": "dflash"}  # Domino: a block drafter, costed as DFlash


@dataclass(frozen=True)
class VerlSpeculation:
    """How a verl run speculates in its rollout: its drafter's method and training (tltsim.drafter.methods:
    cotrain every step, periodic every `train_interval` steps, or frozen) and the draft tree (depth, top-k, drafted
    tokens verified)."""

    path: str
    method: str
    engine: str  # vllm or sglang (actor_rollout_ref.rollout.name)
    depth: int
    topk: int
    verify: int
    training: str
    train_interval: int = 1  # RL steps between the drafter's trainings (1 unless periodic)
    source: str = ""  # the config section it came from

    @property
    def strategy(self):
        from tltsim.control.strategy import Strategy

        return Strategy(self.depth, self.topk, self.verify)


def read_speculation(path) -> VerlSpeculation | None:
    """The run's speculative settings, None when its rollout does not speculate. verl-SpeCo's drafter
    (`actor_rollout_ref.rollout.drafter.enable`) is read first, then verl's own MTP rollout (`model.mtp.enable` and
    `enable_rollout`): on vLLM `method` and `num_speculative_tokens` (a chain; `engine_kwargs.vllm.speculative_config`
    overrides them as verl merges it), on SGLang `speculative_num_steps`, `speculative_eagle_topk` and
    `speculative_num_draft_tokens` (which counts the tree's root, the last verified token, as SGLang does)."""
    path = _config_file(Path(path))
    get = _Reader(_omega(path), path)
    engine = (get.text(f"{ROLLOUT}.name") or "vllm").lower()
    if get.flag(f"{SPECO}.enable"):
        algorithm = (get.text(f"{SPECO}.speculative_algorithm") or "EAGLE3").lower()
        depth = get.whole(f"{SPECO}.rollout.spec_steps") or 1
        interval = get.whole(f"{SPECO}.training.training_interval_steps") or 1
        training = ("frozen" if not get.flag(f"{SPECO}.enable_drafter_training") else
                    "periodic" if interval > 1 else "cotrain")
        return VerlSpeculation(
            str(path), _method(get, f"{SPECO}.speculative_algorithm", algorithm), engine, depth,
            get.whole(f"{SPECO}.rollout.spec_topk") or 1, get.whole(f"{SPECO}.rollout.spec_verify_tokens") or depth,
            training, interval if training == "periodic" else 1, SPECO)
    if not (get.flag(f"{MTP}.enable") and get.flag(f"{MTP}.enable_rollout")):
        return None
    training = "cotrain" if get.flag(f"{MTP}.enable_train") else "frozen"
    if engine == "sglang":
        depth = get.whole(f"{MTP}.speculative_num_steps") or 3
        topk = get.whole(f"{MTP}.speculative_eagle_topk") or 1
        tokens = get.whole(f"{MTP}.speculative_num_draft_tokens") or depth + 1
        if tokens < 2:
            raise TltsimError(f"{path}: {MTP}.speculative_num_draft_tokens = {tokens} verifies no drafted token (it "
                              f"counts the last verified token too); give at least 2")
        algorithm = (get.text(f"{MTP}.speculative_algorithm") or "EAGLE").lower()
        method = "mtp" if algorithm in ("eagle", "nextn") else _method(get, f"{MTP}.speculative_algorithm", algorithm)
        return VerlSpeculation(str(path), method, engine, depth, topk, tokens - 1, training, 1, MTP)
    method = (get.text(f"{VLLM_SPEC}.method") or get.text(f"{MTP}.method") or "mtp").lower()
    k = get.whole(f"{VLLM_SPEC}.num_speculative_tokens") or get.whole(f"{MTP}.num_speculative_tokens") or 1
    return VerlSpeculation(str(path), _method(get, f"{MTP}.method", method), engine, k, 1, k, training, 1, MTP)


def _method(get: "_Reader", key: str, name: str) -> str:
    if name not in METHOD_OF:
        raise TltsimError(f"{get.path}: {key} = {name!r} is not a drafter tltsim models; give one of "
                          f"{', '.join(sorted(METHOD_OF))}")
    return METHOD_OF[name]


def _omega(path: Path):
    """The config as OmegaConf reads it (checked as read_verl_config checks it)."""
    import yaml
    from omegaconf import OmegaConf

    read_verl_config(path)  # every check of the file, once
    return OmegaConf.create(yaml.safe_load(read_config(path, "verl config").decode("utf-8")))
