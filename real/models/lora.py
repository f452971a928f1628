"""LoRA adapters on a target (peft), as RL runs of a pretrained model often train it: `add_lora` puts rank-r
adapters on every attention and MLP projection and freezes everything else (embeddings, norms, the tied
lm_head), so the GRPO update computes and all-reduces the adapters' gradients only and AdamW keeps moments for
them only.

Rollout decodes with the adapters merged into the base weights (W + B A scale), as a LoRA run's rollout
engine does after its weight sync, so a decode iteration costs what the plain model's does; `unmerged`
undoes the merge for the update's forwards and backward, and merges again after. A checkpoint of the target
is its merged weights under the model's own names (`save_merged`: any tool loads it as a plain model) and
the adapters beside it (ADAPTER_FILE); `resume` restores both, so that the merged model and its adapters are
the ones saved.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from tltsim.core.errors import TltsimError

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_FILE = "lora_adapters.pt"  # beside a checkpoint's merged target weights


def add_lora(model, rank: int, seed: int = 0):
    """Rank-`rank` adapters (alpha 2 x rank, no dropout) on `model`'s PROJECTIONS, merged (B starts at zero, so
    the model computes what it did); every other parameter frozen. Returns `model` (changed in place)."""
    from peft import LoraConfig, inject_adapter_in_model

    if rank < 1:
        raise TltsimError(f"lora rank {rank}: must be >= 1")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                           target_modules=list(PROJECTIONS)), model)
    dtype = next(model.parameters()).dtype
    for layer in _lora_layers(model):
        layer.to(dtype)
        layer.merge()
    return model


def has_lora(model) -> bool:
    return bool(_lora_layers(model))


def _lora_layers(model) -> list:
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


@contextmanager
def unmerged(model):
    """The adapters out of the base weights while inside (training), merged again after."""
    layers = _lora_layers(model)
    for layer in layers:
        layer.unmerge()
    try:
        yield model
    finally:
        for layer in layers:
            layer.merge()


def adapter_state(model) -> dict[str, torch.Tensor]:
    """The adapters' weights (CPU copies), by parameter name."""
    return {k: v.detach().cpu().clone() for k, v in model.named_parameters() if "lora_" in k}


def save_merged(model, directory: str | Path) -> None:
    """`save_pretrained` of the merged weights under the plain model's names, and ADAPTER_FILE beside them."""
    plain = {k.replace(".base_layer.", "."): v for k, v in model.state_dict().items() if "lora_" not in k}
    model.save_pretrained(directory, state_dict=plain)
    torch.save(adapter_state(model), Path(directory) / ADAPTER_FILE)


def resume(model, directory: str | Path) -> None:
    """Load the adapters saved by `save_merged` into `model` (made by `add_lora` from that directory's merged
    weights): the base weights stay the merged ones, marked as merged, so `unmerged` subtracts these adapters."""
    path = Path(directory) / ADAPTER_FILE
    if not path.is_file():
        raise TltsimError(f"{path}: not found; the checkpoint was not written by a LoRA run")
    state = torch.load(path, map_location="cpu", weights_only=True)
    params = dict(model.named_parameters())
    if set(state) != {k for k in params if "lora_" in k} or any(v.shape != params[k].shape for k, v in state.items()):
        raise TltsimError(f"{path}: adapters of another shape or rank; resume with the run's own --lora-rank")
    layers = _lora_layers(model)
    for layer in layers:
        layer.unmerge()  # the fresh adapters' B is zero: this leaves the base weights as loaded
    with torch.no_grad():
        for k, v in state.items():
            params[k].copy_(v)
    for layer in layers:
        layer.merged_adapters = list(layer.active_adapters)  # the loaded weights already hold them
