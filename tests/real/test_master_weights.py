"""real.drafters.master_weights: AdamW on fp32 masters of bf16 parameters."""
import torch

from real.drafters.master_weights import MasterWeightAdamW


def _grads(seed: int, shape, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(n)]


def _weights(shape) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 0.02


def test_bf16_masters_follow_fp32_adamw_and_the_model_holds_them_rounded():
    shape, lr = (64, 32), 1e-5
    model = torch.nn.Parameter(_weights(shape).to(torch.bfloat16))
    reference = torch.nn.Parameter(model.detach().float().clone())  # what fp32 AdamW does with the same gradients
    opt, ref_opt = MasterWeightAdamW([model], lr=lr), torch.optim.AdamW([reference], lr=lr)
    for g in _grads(1, shape, 5):
        opt.zero_grad()
        model.grad = g.to(torch.bfloat16)
        opt.step()
        ref_opt.zero_grad()
        reference.grad = model.grad.float()
        ref_opt.step()
    (master,) = opt.masters
    assert master.dtype == torch.float32 and master is not model
    assert torch.equal(master, reference.detach())
    assert torch.equal(model.detach(), master.detach().to(torch.bfloat16))


def test_a_small_step_moves_the_master_where_plain_bf16_adamw_rounds_it_away():
    shape, lr = (64, 32), 1e-5
    plain = torch.nn.Parameter(_weights(shape).to(torch.bfloat16))
    mixed = torch.nn.Parameter(plain.detach().clone())
    start = plain.detach().clone()
    plain_opt, mixed_opt = torch.optim.AdamW([plain], lr=lr), MasterWeightAdamW([mixed], lr=lr)
    (g,) = _grads(2, shape, 1)
    plain.grad, mixed.grad = g.to(torch.bfloat16), g.to(torch.bfloat16)
    plain_opt.step()
    mixed_opt.step()
    plain_moved = (plain.detach() != start).float().mean().item()
    master_moved = (mixed_opt.masters[0].detach() != start.float()).float().mean().item()
    assert master_moved == 1.0
    assert plain_moved < 0.5  # a 1e-5 step is below half a bf16 ulp for most weights of this size


def test_fp32_parameters_are_their_own_masters_and_step_as_adamw_does():
    shape, lr = (16, 8), 1e-3
    a = torch.nn.Parameter(_weights(shape))
    b = torch.nn.Parameter(a.detach().clone())
    opt, ref_opt = MasterWeightAdamW([a], lr=lr), torch.optim.AdamW([b], lr=lr)
    assert opt.masters[0] is a
    for g in _grads(3, shape, 3):
        a.grad, b.grad = g.clone(), g.clone()
        opt.step()
        ref_opt.step()
    assert torch.equal(a.detach(), b.detach())


def test_state_dict_resumes_from_the_unrounded_masters():
    shape, lr = (32, 16), 1e-4
    grads = _grads(4, shape, 6)

    def fresh():
        return torch.nn.Parameter(_weights(shape).to(torch.bfloat16))

    def step(p, opt, g):
        p.grad = g.to(torch.bfloat16)
        opt.step()

    whole = fresh()
    whole_opt = MasterWeightAdamW([whole], lr=lr)
    for g in grads:
        step(whole, whole_opt, g)
    first = fresh()
    first_opt = MasterWeightAdamW([first], lr=lr)
    for g in grads[:3]:
        step(first, first_opt, g)
    state = first_opt.state_dict()
    resumed = torch.nn.Parameter(first.detach().clone())  # the model as a checkpoint holds it: rounded to bf16
    resumed_opt = MasterWeightAdamW([resumed], lr=lr)
    resumed_opt.load_state_dict(state)
    for g in grads[3:]:
        step(resumed, resumed_opt, g)
    assert torch.equal(resumed_opt.masters[0], whole_opt.masters[0])
    assert torch.equal(resumed.detach(), whole.detach())


def test_a_plain_adamw_state_still_loads():
    shape = (8, 4)
    p = torch.nn.Parameter(_weights(shape).to(torch.bfloat16))
    plain = torch.optim.AdamW([torch.nn.Parameter(p.detach().float())], lr=1e-3)
    plain.param_groups[0]["params"][0].grad = torch.ones(shape)
    plain.step()
    opt = MasterWeightAdamW([p], lr=1e-3)
    opt.load_state_dict(plain.state_dict())
    assert int(opt.optimizer.state_dict()["state"][0]["step"]) == 1
    assert torch.equal(opt.masters[0], p.detach().float())
