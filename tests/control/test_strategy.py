import pytest

from tltsim.core.errors import TltsimError
from tltsim.control.strategy import DEFAULT_ARMS, Strategy, parse_arms


def test_parse_round_trips():
    s = Strategy.parse("8_4_48")
    assert s == Strategy(depth=8, topk=4, verify=48)
    assert str(s) == "8_4_48"
    assert Strategy.parse(s) is s


def test_chain_is_d_1_d():
    assert str(Strategy.chain(5)) == "5_1_5"


def test_default_arms():
    assert [str(a) for a in DEFAULT_ARMS] == ["8_4_48", "8_4_32", "8_4_16", "8_4_8"]


@pytest.mark.parametrize("bad", ["8_4", "8-4-48", "a_b_c", "", "8_4_48_1", None, 8])
def test_bad_strings_say_the_expected_form(bad):
    with pytest.raises(TltsimError, match="expected depth_topk_verify like 8_4_48"):
        Strategy.parse(bad)


def test_zero_field_is_rejected():
    with pytest.raises(TltsimError, match="topk=0"):
        Strategy.parse("8_0_48")


def test_parse_arms():
    assert parse_arms("8_4_48, 4_2_8") == (Strategy(8, 4, 48), Strategy(4, 2, 8))
    with pytest.raises(TltsimError, match="listed twice"):
        parse_arms(["8_4_48", Strategy(8, 4, 48)])
    with pytest.raises(TltsimError, match="empty"):
        parse_arms([])
