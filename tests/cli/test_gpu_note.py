"""A verl config names no GPU type: without --gpu, one note says which GPU is assumed, the result's config
records it, and the report's header shows it."""
import yaml

from tltsim.analysis.report.page import build_report
from tltsim.cli import main
from tltsim.core.records import Result
from tltsim.trace import save, synth


def _verl_run(path):
    cfg = {"data": {"train_batch_size": 8, "max_response_length": 2048},
           "actor_rollout_ref": {"model": {"path": "/models/Qwen2.5-7B-Instruct"},
                                 "rollout": {"n": 4, "tensor_model_parallel_size": 4, "response_length": 2048}},
           "trainer": {"n_gpus_per_node": 8, "nnodes": 1}}
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return path


def test_a_verl_config_without_a_gpu_gets_one_note_recorded_in_the_config_and_the_report(tmp_path, capsys):
    run = _verl_run(tmp_path / "run")
    trace = save(synth("dapo", 2, 8, 4, 2048, seed=1), tmp_path / "t.parquet")
    args = ["simulate", "--trace", str(trace), "--verl-config", str(run), "--policy", "verl", "--no-progress"]
    assert main([*args, "-o", str(tmp_path / "assumed")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "GPU type" in line]
    assert notes == ["tltsim: note: the verl config does not name the GPU type; assuming h100 (pass --gpu to name yours)"]
    res = Result.load(tmp_path / "assumed")
    assert res.config["cluster"]["gpu"] == "h100" and res.config["cluster"]["gpu_assumed"] is True
    assert "8 × h100 (assumed: no GPU type was given), TP 4" in build_report([res])
    # named by --gpu, or by the --config file: no note, nothing assumed
    (tmp_path / "c.toml").write_text('[cluster]\ngpu = "a100"\n')
    for extra, gpu in ((["--gpu", "h200"], "h200"), (["--config", str(tmp_path / "c.toml")], "a100")):
        out = tmp_path / gpu
        assert main([*args, *extra, "-o", str(out)]) == 0
        assert "GPU type" not in capsys.readouterr().err
        cluster = Result.load(out).config["cluster"]
        assert (cluster["gpu"], cluster["gpu_assumed"]) == (gpu, False)  # the header shows no "(assumed"
