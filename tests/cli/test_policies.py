"""`tltsim policies`: every policy in one line with its knobs, and what it lists is what --knob takes."""
import json
import re
import warnings

import pytest

from tltsim.cli import main
from tltsim.control.decisions import knobs_from_text
from tltsim.core.errors import TltsimError
from tltsim.policies import knob_text, make_policy, policy_knobs, policy_names


def test_every_policy_is_listed_with_a_line_and_its_knobs(capsys):
    assert main(["policies", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert list(listed) == policy_names() and all(entry["about"] for entry in listed.values())
    assert listed["verl"]["knobs"] == {}
    assert listed["partial"]["knobs"]["ratio"] == {"default": 2.0, "takes": "number in [1.0, 16.0]"}
    assert listed["migrate+tlt"]["knobs"]["release"]["default"] == "drafter"  # the combination's own default
    assert listed["tlt-base"]["knobs"]["drafter"]["default"] == "ngram"  # the variant's
    assert main(["policies", "partial"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("partial: partial rollout") and re.match(r"\s+ratio\s+2\.0\s+number in", out[1])
    assert main(["policies", "nope"]) == 2 and "unknown policy 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("name", policy_names())
def test_each_listed_default_is_taken_and_each_listed_bound_refuses_past_it(name):
    for knob, default, takes in policy_knobs(name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a knob set where another knob's value makes it idle warns
            make_policy(name, knobs_from_text([f"{knob}={knob_text(default)}"]))  # as listed
        if m := re.fullmatch(r"(?:integer|number) in \[(\S+), (\S+)\]", takes):
            for bound, past in ((m[1], -1), (m[2], 1)):
                if bound not in ("-inf", "inf"):
                    with pytest.raises(TltsimError):
                        make_policy(name, {knob: float(bound) + past})
        elif " | " in takes:
            with pytest.raises(TltsimError):
                make_policy(name, {knob: "no-such-value"})
