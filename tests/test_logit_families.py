"""The benchmark's logit families have the entropies they claim (benchmarks/logit_families.py)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import logit_families  # noqa: E402


@pytest.mark.parametrize("vocab", [32000, 151936])
def test_families_have_their_entropies(vocab):
    generator = torch.Generator().manual_seed(0)
    entropy = {family: logit_families.entropy_nats(logit_families.make_logits(family, 3, vocab, generator, "cpu"))
               for family in logit_families.FAMILIES}
    assert (entropy["flat"] > torch.log(torch.tensor(float(vocab))) - 6).all()  # nearly uniform
    assert ((entropy["typical"] > 2) & (entropy["typical"] < 4)).all(), entropy["typical"]
    assert (entropy["peaked"] < 0.5).all(), entropy["peaked"]


def test_typical_rows_differ_and_have_a_long_tail():
    generator = torch.Generator().manual_seed(1)
    logits = logit_families.make_logits("typical", 2, 32000, generator, "cpu")
    assert logits.dtype == torch.float32 and logits[0].argmax() != logits[1].argmax()
    p = torch.softmax(logits[0].double(), 0).sort(descending=True).values
    assert p[0] < 0.5 and p[:100].sum() < 0.99 and p[:100].sum() > 0.5  # a head, and mass beyond it


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="family must be one of"):
        logit_families.make_logits("spiky", 1, 10, torch.Generator(), "cpu")
