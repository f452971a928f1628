"""GPU and model descriptions for the cost model.

Presets are TOML files in tltsim/presets/{gpus,models}/; names match
case-insensitively (`qwen2.5-7b`, `H100`). A user passes a path to their own
TOML file with the same keys instead of a name, or, for a model, the Hugging Face
model directory (or its config.json) as it is: its transformers config is read
(`ModelSpec.from_hf_config`), so a model the real backend loads is costed from the
same description.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from importlib import resources
from pathlib import Path

from tltsim.core.errors import TltsimError
from tltsim.core.config_files import parse_toml

BYTES_BF16 = 2


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gb: float  # device memory, GB (1e9 bytes)
    bandwidth_tbs: float  # memory bandwidth, TB/s
    bf16_tflops: float  # dense bf16 peak, TFLOP/s
    interconnect_gbs: float  # per-direction GPU-GPU link bandwidth inside a node, GB/s

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_tbs * 1e12

    @property
    def flops(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer with GQA and gated MLPs; with `experts` > 0 every layer's MLP is a mixture of
    experts (Qwen3-MoE: `experts` routed experts of inner size `moe_intermediate`, `experts_per_token` of them
    per token, no shared expert; docs/design.md#model-presets)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int  # MLP inner size (gated: three matrices); of an MoE model, its dense MLP size (the drafter's)
    vocab: int
    tied_embeddings: bool = False
    head_dim: int = 0  # per attention head; 0: hidden / heads (Qwen3 sets it: heads x head_dim != hidden)
    experts: int = 0  # routed experts per layer; 0: a dense model
    experts_per_token: int = 0  # experts each token is routed to (top-k)
    moe_intermediate: int = 0  # one expert's MLP inner size

    def __post_init__(self):
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.experts and not (0 < self.experts_per_token <= self.experts and self.moe_intermediate > 0):
            raise TltsimError(f"model {self.name}: experts = {self.experts} needs 0 < experts_per_token <= experts "
                              f"(it is {self.experts_per_token}) and moe_intermediate > 0 (it is {self.moe_intermediate})")

    @property
    def attention_params(self) -> int:
        """q and o (hidden x heads x head_dim each), k and v (hidden x kv_heads x head_dim each)."""
        return 2 * self.hidden * (self.heads + self.kv_heads) * self.head_dim

    @property
    def expert_params(self) -> int:
        """One routed expert of one layer (a gated MLP); 0 for a dense model."""
        return 3 * self.hidden * self.moe_intermediate if self.experts else 0

    @property
    def dense_layer_params(self) -> int:
        """A dense decoder layer: attention and a gated MLP of `intermediate`."""
        return self.attention_params + 3 * self.hidden * self.intermediate

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: attention, and a gated MLP or (MoE) every expert and the router."""
        if not self.experts:
            return self.dense_layer_params
        return self.attention_params + self.experts * self.expert_params + self.hidden * self.experts

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embed_params

    @property
    def active_params(self) -> int:
        """Weights one token computes with: all but the experts it is not routed to (= params for a dense model)."""
        return self.params - self.layers * (self.experts - self.experts_per_token) * self.expert_params

    @property
    def weight_bytes(self) -> int:
        return self.params * BYTES_BF16

    @property
    def expert_bytes(self) -> int:
        """One routed expert of one layer, bf16."""
        return self.expert_params * BYTES_BF16

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer, bf16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * BYTES_BF16

    @property
    def attn_flops_per_ctx_token(self) -> int:
        """FLOPs one query token spends per context token (QK^T and AV, all layers)."""
        return 4 * self.layers * self.heads * self.head_dim

    @property
    def drafter_params(self) -> int:
        """EAGLE-style drafter: fc (2h -> h) + one dense decoder layer (of an MoE model too, with its dense MLP size);
        lm_head is shared (counted at run time)."""
        return 2 * self.hidden * self.hidden + self.dense_layer_params

    @classmethod
    def from_hf_config(cls, cfg: dict, name: str = "custom") -> "ModelSpec":
        """Build from a transformers config dict (Llama / Qwen2 / Qwen3 / Qwen3-MoE keys): a model directory's
        config.json, as `load_model` reads it."""
        return cls(
            name=name,
            layers=cfg["num_hidden_layers"],
            hidden=cfg["hidden_size"],
            heads=cfg["num_attention_heads"],
            kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
            intermediate=cfg["intermediate_size"],
            vocab=cfg["vocab_size"],
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            head_dim=cfg.get("head_dim") or 0,
            **({"experts": cfg["num_experts"], "experts_per_token": cfg["num_experts_per_tok"],
                "moe_intermediate": cfg["moe_intermediate_size"]} if cfg.get("num_experts") else {}),
        )


def _preset_dir(kind: str):
    return resources.files("tltsim") / "presets" / kind


def preset_names(kind: str) -> list[str]:
    """Names of the shipped presets of `kind` ("gpus" or "models")."""
    return sorted(p.name[: -len(".toml")] for p in _preset_dir(kind).iterdir() if p.name.endswith(".toml"))


def _load(kind: str, cls, name_or_path: str):
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.exists():
        text, origin = path.read_bytes(), str(path)
    else:
        wanted = name_or_path.lower().removesuffix(".toml")
        match = [n for n in preset_names(kind) if n == wanted]
        if not match:
            raise TltsimError(
                f"unknown {kind[:-1]} preset {name_or_path!r}; choose one of {', '.join(preset_names(kind))}, "
                f"or pass the path of a .toml file with the keys {', '.join(f.name for f in fields(cls))}"
            )
        origin = f"preset {match[0]}"
        text = (_preset_dir(kind) / f"{match[0]}.toml").read_bytes()
    data = parse_toml(text, origin)
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING}
    unknown = sorted(set(data) - names)
    missing = sorted(required - set(data))
    if unknown or missing:
        raise TltsimError(
            f"{origin}: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing key(s) {', '.join(missing)}"] if missing else [])
            ) + f"; the keys are {', '.join(sorted(names))}"
        )
    for k, v in data.items():
        if k not in ("name", "tied_embeddings") and (not isinstance(v, (int, float)) or v <= 0):
            raise TltsimError(f"{origin}: {k} = {v!r} must be a positive number")
    return cls(**data)


def load_gpu(name_or_path: str) -> GPU:
    return _load("gpus", GPU, name_or_path)


def load_model(name_or_path: str) -> ModelSpec:
    """A preset by name, a TOML file, or a Hugging Face model directory (or its config.json)."""
    path = Path(name_or_path)
    config = path / "config.json" if path.is_dir() else path
    if config.name == "config.json" and config.is_file():
        return _from_hf(config)
    return _load("models", ModelSpec, name_or_path)


def _from_hf(config: Path) -> ModelSpec:
    import json

    try:
        cfg = json.loads(config.read_text())
        spec = ModelSpec.from_hf_config(cfg, name=cfg.get("_name_or_path") or config.parent.name)
    except json.JSONDecodeError as e:
        raise TltsimError(f"{config}: not JSON ({e.msg}, line {e.lineno}); give a model directory's config.json") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise TltsimError(f"{config}: not a transformers causal-LM config (no {e}); give a Llama, Qwen2, Qwen3 or "
                          f"Qwen3-MoE model directory, or a model preset") from None
    for f in fields(ModelSpec):
        v = getattr(spec, f.name)
        if f.name in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab") and not (isinstance(v, int) and v > 0):
            raise TltsimError(f"{config}: {f.name} = {v!r} must be a positive number")
    return spec
