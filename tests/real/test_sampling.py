"""The acceptance rule: exact greedy cases, the sampling distribution (chi-square), power controls, seeds."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from tiny_lm import tiny_target

import real.engine.sampling as sampling
from real.drafters.eagle import Drafter
from real.engine.generate import generate
from real.engine.sampling import target_probs, verify_tree
from real.settings import GenerateSettings, SamplingParams
from tltsim.core.errors import TltsimError

GREEDY = SamplingParams()


def _logits(argmax_per_node: list[int], vocab: int = 10) -> torch.Tensor:
    """Logits [1, N, V] whose argmax at node i is argmax_per_node[i]."""
    out = torch.zeros(1, len(argmax_per_node), vocab)
    out[0, torch.arange(len(argmax_per_node)), torch.tensor(argmax_per_node)] = 5.0
    return out


def _verify(tokens, parents, argmax_per_node, params=GREEDY):
    return verify_tree(torch.tensor([tokens]), torch.tensor([parents]), _logits(argmax_per_node), params,
                       torch.Generator().manual_seed(0))


def test_greedy_chain_accepts_the_matching_prefix():
    path, accepted, nxt = _verify([0, 5, 6, 7], [-1, 0, 1, 2], [5, 6, 2, 9])
    assert path.tolist() == [[0, 1, 2, -1]] and accepted.tolist() == [2] and nxt.tolist() == [2]  # 2 recovered


def test_greedy_tree_follows_the_matching_sibling_and_takes_the_bonus():
    # root -> {4 (node 1), 5 (node 2)}; node 2 -> {6 (node 3), 7 (node 4)}
    path, accepted, nxt = _verify([0, 4, 5, 6, 7], [-1, 0, 0, 2, 2], [5, 3, 7, 3, 1])
    assert path.tolist() == [[0, 2, 4, -1, -1]] and accepted.tolist() == [2] and nxt.tolist() == [1]  # 1 is bonus


def test_greedy_rejecting_every_draft_emits_the_targets_token():
    path, accepted, nxt = _verify([0, 4, 5], [-1, 0, 0], [8, 0, 0])
    assert path.tolist() == [[0, -1, -1]] and accepted.tolist() == [0] and nxt.tolist() == [8]


def test_sampling_with_a_point_mass_target_is_greedy():
    sharp = SamplingParams(greedy=False, temperature=0.01)
    path, accepted, nxt = _verify([0, 4, 5, 6, 7], [-1, 0, 0, 2, 2], [5, 3, 7, 3, 1], sharp)
    assert path.tolist() == [[0, 2, 4, -1, -1]] and accepted.tolist() == [2] and nxt.tolist() == [1]


def _reference_probs(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """Naive temperature + nucleus: keep the most probable tokens until their mass reaches top_p."""
    z = logits / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    keep, mass = [], 0.0
    for i in np.argsort(-p, kind="stable"):
        keep.append(i)
        mass += p[i]
        if mass >= top_p:
            break
    q = np.zeros_like(p)
    q[keep] = p[keep]
    return q / q.sum()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.5, 0.9), (2.0, 0.3), (1.0, 1e-6)])
def test_target_probs_match_a_naive_reference(temperature, top_p):
    logits = torch.randn(5, 12, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    got = target_probs(logits, SamplingParams(greedy=False, temperature=temperature, top_p=top_p)).numpy()
    want = np.stack([_reference_probs(row, temperature, top_p) for row in logits.numpy()])
    np.testing.assert_allclose(got, want, atol=1e-12)


# the candidates the nucleus is found among, from peaked (the top 64) to flat (the whole vocabulary)
@pytest.mark.parametrize("scale, candidates", [(8.0, 64), (3.0, 512), (0.5, 4096), (0.05, 5000)])
def test_the_nucleus_of_a_large_vocabulary_matches_the_reference(scale, candidates):
    logits = scale * torch.randn(4, 5000, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    params = SamplingParams(greedy=False, temperature=1.0, top_p=0.9)
    probs = torch.softmax(logits, dim=-1)
    covered = [k for k in (64, 512, 4096, 5000) if bool((probs.topk(k, dim=-1).values.sum(dim=-1) >= 0.9).all())]
    assert covered[0] == candidates  # each case takes the path it is named for
    got = target_probs(logits, params).numpy()
    want = np.stack([_reference_probs(row, 1.0, 0.9) for row in logits.numpy()])
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(greedy=False, temperature=0.0), dict(top_p=0.0), dict(top_p=1.5)])
def test_bad_sampling_params_are_user_errors(kwargs):
    with pytest.raises(TltsimError):
        SamplingParams(**kwargs)


# --- distribution tests ------------------------------------------------------------------------------

V = 8  # tiny vocabulary: V * V joint cells get meaningful counts
PROMPT = [1, 2, 3, 4]
DRAWS = 3000


def _expected(params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Exact P(x1) [V] and P(x1, x2) [V, V] of the target under `params`, from full forwards."""
    target = tiny_target("llama", vocab=V)
    with torch.no_grad():
        first = target(torch.tensor([PROMPT])).logits[0, -1].numpy()
        second = target(torch.tensor([PROMPT + [x] for x in range(V)])).logits[:, -1].numpy()
    p1 = _reference_probs(first, params.temperature, params.top_p)
    p2 = np.stack([_reference_probs(row, params.temperature, params.top_p) for row in second])
    return p1, p1[:, None] * p2


def _draws(params: SamplingParams, strategy, seed: int = 0) -> np.ndarray:
    """DRAWS independent (x1, x2) samples: one engine row per draw, all in one batch."""
    target = tiny_target("llama", vocab=V)
    drafter = None if strategy is None else Drafter.for_target(target, seed=5)
    gen = generate(target, [PROMPT] * DRAWS, drafter, GenerateSettings(strategy=strategy, sampling=SamplingParams(greedy=False, temperature=params.temperature, top_p=params.top_p), max_new_tokens=2, eos_token_id=(), seed=seed))
    return np.array(gen.tokens)


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson chi-square p-value; cells with expected count < 5 are pooled into one."""
    counts, expected = counts.ravel(), probs.ravel() * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        if obs[-1] > 0:  # a draw the target gives probability 0
            return 0.0
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp).pvalue


def _pvalues(params, strategy) -> tuple[float, float]:
    x = _draws(params, strategy)
    p1, joint = _expected(params)
    first = np.bincount(x[:, 0], minlength=V)
    pairs = np.bincount(x[:, 0] * V + x[:, 1], minlength=V * V)
    return _chi2_pvalue(first, p1), _chi2_pvalue(pairs, joint)


CASES = [
    (SamplingParams(False, 1.0, 1.0), None),
    (SamplingParams(False, 1.0, 1.0), "3_1_3"),
    (SamplingParams(False, 0.7, 0.8), "3_3_8"),
    (SamplingParams(False, 1.3, 0.9), "2_2_4"),
]


@pytest.mark.parametrize("params,strategy", CASES, ids=["plain", "chain", "tree-top-p", "tree-hot"])
def test_sampled_tokens_follow_the_target_distribution(params, strategy):
    first, joint = _pvalues(params, strategy)
    assert first > 1e-3 and joint > 1e-3, (first, joint)


def _accept_first_child(tokens, is_child, r, generator):
    """Wrong rule: accept whatever the drafter proposed."""
    return is_child.any(dim=1), is_child.long().argmax(dim=1), r


def _recover_from_p(tokens, is_child, r, generator):
    """Wrong rule: right acceptance test, but the recovered token is drawn from p, not the residual."""
    found, nxt, _ = _correct_try_children(tokens, is_child, r.clone(), generator)
    return found, nxt, r


_correct_try_children = sampling._try_children


@pytest.mark.parametrize("wrong_rule", [_accept_first_child, _recover_from_p])
@pytest.mark.parametrize("params,strategy", CASES[1:3], ids=["chain", "tree-top-p"])
def test_the_distribution_test_rejects_a_wrong_rule(monkeypatch, wrong_rule, params, strategy):
    """Power control: the same test, with a deliberately wrong acceptance rule, must fail."""
    monkeypatch.setattr(sampling, "_try_children", wrong_rule)
    first, joint = _pvalues(params, strategy)
    assert min(first, joint) < 1e-6, (first, joint)


def test_sampling_is_deterministic_by_seed():
    params = SamplingParams(False, 1.0, 1.0)
    a, b, c = _draws(params, "3_2_4", seed=7)[:50], _draws(params, "3_2_4", seed=7)[:50], _draws(params, "3_2_4", seed=8)[:50]
    assert np.array_equal(a, b) and not np.array_equal(a, c)
