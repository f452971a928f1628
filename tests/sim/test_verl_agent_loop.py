"""A verl tool-agent-loop run read as verl writes it (docs/verl.md#a-tool-agent-loop-run): the agent loop's
per-trajectory timers in the metrics, the multi_turn settings in the config, and the run calibrated turn by turn."""
import json
import re
from dataclasses import replace

import numpy as np
import pytest
import yaml

from tltsim.analysis.calibration import calibrate
from tltsim.cli import main
from tltsim.config import ClusterConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.cost import PhaseCalibration
from tltsim.sim.simulator import Simulator
from tltsim.trace import save, synth
from tltsim.trace.schema import Trace
from tltsim.verl_config import read_verl_config
from tltsim.verl_metrics import agent_loop, read_metrics

CFG = SimConfig(cluster=ClusterConfig(gpus=8, tp=4, gpu="h100", model="qwen2.5-7b", max_running=64))
CLUSTER = ["--gpus", "8", "--tp", "4", "--gpu", "h100", "--model", "qwen2.5-7b", "--max-num-seqs", "64"]
GEN_FACTOR, TOOL_S, GEN_FIXED = 1.5, 2.0, 3.0  # the run: generation 1.5x the model's, 2 s a tool call, 3 s more a step


def _agent_loop_timing(gen, tool, slowest_prompt, slowest_response):
    """What verl's AgentLoopManager._performance_metrics puts in the trainer's timing dict for a step's
    trajectories (gen, tool: seconds each), named as compute_timing_metrics logs it: timing_s/<name>."""
    gen, tool = np.asarray(gen, float), np.asarray(tool, float)
    timing = {"agent_loop/num_preempted/min": -1, "agent_loop/num_preempted/max": -1,  # -1: not available
              "agent_loop/num_preempted/mean": -1.0}
    for name, t in (("generate_sequences", gen), ("tool_calls", tool)):
        timing.update({f"agent_loop/{name}/min": t.min(), f"agent_loop/{name}/max": t.max(),
                       f"agent_loop/{name}/mean": t.mean()})
    slowest = int(np.argmax(gen + tool))
    timing.update({"agent_loop/slowest/generate_sequences": gen[slowest], "agent_loop/slowest/tool_calls": tool[slowest],
                   "agent_loop/slowest/prompt_length": slowest_prompt, "agent_loop/slowest/response_length": slowest_response,
                   "agent_loop/slowest/num_preempted": -1})
    return {f"timing_s/{k}": float(v) for k, v in timing.items()}


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory):
    """A synthetic multi-turn trace (verl's 1-based steps), and verl's file-logger metrics of a run of it whose
    tool calls take TOOL_S each and whose generation is GEN_FACTOR x the model's: the simulator's replay of the
    run gives each trajectory's seconds in generation, as verl's agent loop times them."""
    t = synth("agentic", 6, 8, 4, 4096, seed=3)
    trace = Trace(t.df.assign(step=t.df.step + 1), t.meta)
    run = Trace(trace.df.assign(tool_latency_s=[[None if v is None else TOOL_S for v in x]
                                                for x in trace.df.tool_latency_s]), trace.meta)
    res = Simulator(run, replace(CFG, policy="verl", calibration=PhaseCalibration(rollout=GEN_FACTOR))).run()
    turns = res.turns.sort_values(["step", "prompt_id", "sample", "turn"])
    key = [turns["step"], turns["prompt_id"], turns["sample"]]
    start = turns["step"].map(res.steps.set_index("step")["t_start"])
    ready = (turns.groupby(key)["finished_at"].shift() + turns.groupby(key)["tool_latency_s"].shift()).fillna(start)
    gen = (turns["finished_at"] - ready).groupby(key).sum()  # per trajectory
    lines = [{"step": 0, "data": {"val-core/acc/mean@1": 0.2}}]
    tokens = run.sequence_tokens()
    for s, r in res.steps.set_index("step").iterrows():
        rows = run.df[run.df.step == s]
        tool = rows.tool_latency_s.map(lambda x: sum(v for v in x if v is not None)).to_numpy()
        n_turns = rows.turn_response_len.map(len) + rows.tool_latency_s.map(lambda x: sum(v is not None for v in x)) + 1
        slow = tokens[(run.df.step == s).to_numpy()]
        data = {"timing_s/gen": r.rollout_s + GEN_FIXED, "timing_s/step": r.total_s + GEN_FIXED,
                "response_length/mean": float(slow.mean()) + 1, "response_length/max": float(slow.max()) + 1,
                "num_turns/min": int(n_turns.min()), "num_turns/max": int(n_turns.max()),
                "num_turns/mean": float(n_turns.mean()),
                **_agent_loop_timing(gen.loc[s].to_numpy(), tool, int(rows.prompt_len.max()), int(slow.max()))}
        lines.append({"step": int(s), "data": data})
    path = tmp_path_factory.mktemp("run") / "metrics.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return trace, path


def _config(path, **multi_turn):
    cfg = {"data": {"train_batch_size": 8, "max_response_length": 4096},
           "actor_rollout_ref": {"model": {"path": "/models/Qwen2.5-7B-Instruct"},
                                 "rollout": {"n": 4, "tensor_model_parallel_size": 4, "max_num_seqs": 64,
                                             "response_length": "${oc.select:data.max_response_length,512}",
                                             "multi_turn": {"enable": True, "max_assistant_turns": 16,
                                                            "max_user_turns": None, "max_parallel_calls": 1,
                                                            "tool_config_path": "config/tool_config/search_tool.yaml",
                                                            "interaction_config_path": None, "format": "hermes",
                                                            **multi_turn},
                                             "agent": {"num_workers": 8, "default_agent_loop": "tool_agent"}}},
           "trainer": {"n_gpus_per_node": 8, "nnodes": 1}}
    (path / ".hydra").mkdir(parents=True, exist_ok=True)
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return path


def test_the_agent_loops_timers_are_read_by_verls_key_names(agent_run, tmp_path):
    _, path = agent_run
    m = read_metrics(path)
    first = json.loads(path.read_text().splitlines()[1])["data"]
    assert agent_loop(m) and m.index.tolist() == [1, 2, 3, 4, 5, 6]
    assert m.at[1, "agent_gen_mean_s"] == first["timing_s/agent_loop/generate_sequences/mean"]
    assert m.at[1, "agent_tool_max_s"] == first["timing_s/agent_loop/tool_calls/max"]
    assert m.at[1, "slowest_response_len"] == first["timing_s/agent_loop/slowest/response_length"]
    assert m.at[1, "turns_mean"] == first["num_turns/mean"]
    single = tmp_path / "single.jsonl"  # a run without the agent loop: no agent-loop columns, as before
    single.write_text('{"step": 1, "data": {"timing_s/gen": 3.0, "timing_s/step": 9.0}}\n')
    s = read_metrics(single)
    assert not agent_loop(s) and not any(c.startswith(("agent_", "slowest_", "turns_")) for c in s.columns)


def test_an_agent_loop_run_calibrates_generation_and_takes_its_tool_seconds(agent_run):
    trace, path = agent_run
    assert trace.df.tool_latency_s.map(lambda x: any(v not in (None, TOOL_S) for v in x)).any()  # synthetic latencies
    cal = calibrate(trace, CFG, read_metrics(path))
    assert cal.phases.rollout == pytest.approx(GEN_FACTOR, rel=0.03)
    assert cal.phases.rollout_fixed_s == pytest.approx(GEN_FIXED, rel=0.1)
    assert "generate_sequences/mean" in cal.rollout_fit
    tool_note = next(n for n in cal.notes if "tool_calls/mean" in n)
    assert "synth:agentic" in tool_note and f"{TOOL_S:.3g} s a call" in tool_note
    d = cal.per_step
    assert (d["trace_agent_tool_s"] - d["measured_agent_tool_s"]).abs().max() < 1e-9
    assert (d["trace_turns_mean"] == d["metrics_turns_mean"]).all() and d["fitted"].all()
    assert cal.error_after < 0.03 < cal.error_before
    # the lengths verl logs count the tools' answers: the generated tokens alone would not match
    assert (d["trace_len_mean"] > trace.df.groupby("step").response_len.mean().to_numpy() * 1.2).all()


def test_a_single_turn_trace_beside_an_agent_loops_tool_time_is_noted(agent_run):
    trace, path = agent_run
    single = synth("dapo", 6, 8, 4, 4096, seed=3)
    single = Trace(single.df.assign(step=single.df.step + 1), single.meta)
    cal = calibrate(single, CFG, read_metrics(path))
    assert any("the trace is single-turn" in n and "timing_s/agent_loop/tool_calls/mean" in n for n in cal.notes)
    assert "measured_agent_gen_s" not in cal.per_step.columns


def test_the_multi_turn_settings_are_read_and_checked(agent_run, tmp_path):
    trace, _ = agent_run
    v = read_verl_config(_config(tmp_path / "out"))
    mt = v.multi_turn
    assert (mt.enable, mt.max_assistant_turns, mt.max_user_turns, mt.tool_config_path, mt.format,
            mt.default_agent_loop) == (True, 16, None, "config/tool_config/search_tool.yaml", "hermes", "tool_agent")
    assert v.check_trace(trace)[1] == []
    _, notes = read_verl_config(_config(tmp_path / "o2", max_assistant_turns=2)).check_trace(trace)
    assert len(notes) == 1 and "max_assistant_turns = 2 but the trace has a trajectory of" in notes[0]
    single = synth("dapo", 1, 8, 4, 4096, seed=1)
    _, notes = v.check_trace(single)
    assert len(notes) == 1 and "enable is true but the trace is single-turn" in notes[0]
    assert read_verl_config(_config(tmp_path / "o3", enable=False, tool_config_path=None)).multi_turn.enable is False


def test_calibrate_cli_on_an_agent_loop_run(agent_run, tmp_path, capsys):
    trace, path = agent_run
    tpath = save(trace, tmp_path / "t.parquet")
    assert main(["calibrate", "--verl-metrics", str(path), "--trace", str(tpath), "--verl-config",
                 str(_config(tmp_path / "out")), "--gpu", "h100", "--max-num-seqs", "64", "--json",
                 "--save-calibration", str(tmp_path / "cal.json")]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["phases"]["rollout"] == pytest.approx(GEN_FACTOR, rel=0.03)
    assert {"measured_agent_gen_s", "predicted_agent_gen_s", "trace_agent_tool_s"} <= set(cal["per_step"][0])
    assert json.loads((tmp_path / "cal.json").read_text())["phases"] == cal["phases"]


@pytest.mark.parametrize("case, expect", [
    ("metrics", r"metrics\.jsonl, line 3, key 'timing_s/agent_loop/tool_calls/mean': 'slow' is not a number"),
    ("config", r"multi_turn\.enable is true but actor_rollout_ref\.rollout\.multi_turn\.tool_config_path .* is null"),
])
def test_bad_agent_loop_input_is_one_line_and_writes_nothing(agent_run, tmp_path, capsys, case, expect):
    trace, path = agent_run
    lines = path.read_text().splitlines()
    if case == "metrics":
        bad = json.loads(lines[2])
        bad["data"]["timing_s/agent_loop/tool_calls/mean"] = "slow"
        lines[2] = json.dumps(bad)
    mpath = tmp_path / "metrics.jsonl"
    mpath.write_text("\n".join(lines) + "\n")
    config = _config(tmp_path / "out", **({"tool_config_path": None} if case == "config" else {}))
    assert main(["calibrate", "--verl-metrics", str(mpath), "--trace", str(save(trace, tmp_path / "t.parquet")),
                 "--verl-config", str(config), "--gpu", "h100", "--save-calibration", str(tmp_path / "cal.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("tltsim: error: ")
    assert re.search(expect, err), err
    assert not (tmp_path / "cal.json").exists()
    with pytest.raises(TltsimError, match=expect):
        read_metrics(mpath) if case == "metrics" else read_verl_config(config)
