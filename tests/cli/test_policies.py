"""`tltsim policies`: every policy in one line with its knobs, and what it lists is what --knob takes."""
import json
import re
import warnings

import pytest

from tltsim.cli import main
from tltsim.control.decisions import knobs_from_text
from tltsim.core import glossary
from tltsim.core.errors import TltsimError
from tltsim.policies import knob_text, make_policy, policy_knobs, policy_names


def test_every_policy_is_listed_with_a_line_and_its_knobs(capsys):
    assert main(["policies", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert list(listed) == policy_names() and all(entry["about"] for entry in listed.values())
    assert listed["verl"]["knobs"] == {}
    assert listed["partial"]["knobs"]["ratio"] == {"default": 2.0, "takes": "a number in [1.0, 16.0]"}
    assert listed["migrate+tlt"]["knobs"]["release"]["default"] == "drafter"  # the combination's own default
    assert listed["tlt-base"]["knobs"]["drafter"]["default"] == "ngram"  # the variant's
    assert main(["policies", "partial"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("partial: partial rollout") and re.match(r"\s+ratio\s+2\.0\s+a number in", out[1])
    assert main(["policies", "nope"]) == 2 and "unknown policy 'nope'" in capsys.readouterr().err
    assert main(["policies", "VERL+Partial", "--json"]) == 0  # a name as --policies takes it
    assert json.loads(capsys.readouterr().out)["verl+partial"]["knobs"] == listed["partial"]["knobs"]
    assert set(glossary.POLICIES) == set(policy_names())  # a line for each, none for a policy that is gone


@pytest.mark.parametrize("name", policy_names())
def test_each_listed_default_is_taken_and_each_listed_bound_refuses_past_it(name):
    for knob, default, takes in policy_knobs(name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a knob set where another knob's value makes it idle warns
            make_policy(name, knobs_from_text([f"{knob}={knob_text(default)}"]))  # as listed
        m = re.fullmatch(r"an? (integer|number)(?: in \[(\S+), (\S+)\]| >= (\S+)| <= (\S+))?", takes)
        if m:
            kind = int if m[1] == "integer" else float
            lo, hi = m[2] or m[4], m[3] or m[5]
            for bound, past in ((lo, -1), (hi, 1)):
                if bound is not None:
                    with pytest.raises(TltsimError, match=re.escape(f"must be {takes}")):
                        make_policy(name, {knob: kind(float(bound)) + past})
        elif takes.startswith("one of "):
            with pytest.raises(TltsimError, match=re.escape(f"must be {takes}")):
                make_policy(name, {knob: "no-such-value"})
