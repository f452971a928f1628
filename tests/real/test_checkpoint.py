"""A run's policy state checkpoints as plain data (torch.load with weights_only reads it back), and the
objects rebuilt from it decide exactly as the ones that carried on."""
import numpy as np
import torch

from real.run.spot import SampleBuffer
from tltsim.control.decisions import DecisionKnobs

KNOBS = DecisionKnobs(threshold=4, patience=1, tuner="egreedy", arms=("4_2_8", "4_1_4", "2_1_2"), eps=0.5)


def drive(control, rollout: int) -> list:
    """One scripted rollout: batches 6 down to 1, three iterations each; speculation's seconds depend on the
    strategy, the batch and the rollout (the drafter changes), plain ones on the batch. Returns the decisions."""
    control.begin_rollout()
    decisions = []
    for batch in [6, 6, 6, 5, 5, 5, 4, 4, 4, 3, 3, 3, 2, 2, 2, 1, 1, 1]:
        s = control.decide(batch)
        decisions.append(str(s) if s else "")
        if s is None:
            control.observe_plain(batch, 0.1 * batch)
        else:
            seconds = 0.02 * batch * s.verify + 0.05 * s.depth + 0.05 * rollout
            control.observe_spec(s, batch, 2.0 * batch, seconds + 0.03, 0.03)
    return decisions


def test_a_resumed_control_decides_as_the_uninterrupted_one(tmp_path):
    whole, resumed = KNOBS.control(1, seed=3), KNOBS.control(1, seed=3)
    trainer, buffer = KNOBS.trainer(2), SampleBuffer(2, 0.5)
    for r in range(3):
        assert drive(whole, r) == drive(resumed, r)
    trainer.start_rollout(0, 0.0)
    trainer.worker_done(1, 1.5)
    rng = np.random.default_rng(0)
    for step in (0, 1):
        buffer.add(step, [(torch.arange(n), torch.randn(n - 1, 4)) for n in rng.integers(3, 9, size=4)])
    torch.save({"control": resumed.state_dict(), "trainer": trainer.state_dict(), "buffer": buffer.state_dict()},
               tmp_path / "rank0.pt")

    state = torch.load(tmp_path / "rank0.pt", weights_only=True)  # plain data only: no class is unpickled
    fresh, fresh_trainer, fresh_buffer = KNOBS.control(1, seed=3), KNOBS.trainer(2), SampleBuffer(2, 0.5)
    fresh.load_state_dict(state["control"])
    fresh_trainer.load_state_dict(state["trainer"])
    fresh_buffer.load_state_dict(state["buffer"])
    later = [drive(whole, r) for r in range(3, 8)]
    assert [drive(fresh, r) for r in range(3, 8)] == later
    assert len({d for rollout in later for d in rollout}) > 2  # the scenario does decide: plain and several arms
    assert fresh_trainer.log == trainer.log and fresh_trainer.state(1) == trainer.state(1)
    for a, b in zip(fresh_buffer.select(1), buffer.select(1)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert len(fresh_buffer.select(1)) == len(buffer.select(1)) > 0
