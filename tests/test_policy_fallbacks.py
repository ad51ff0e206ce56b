"""The policy decides a cluster's fallback instance types; the decision carries them."""
from __future__ import annotations

import copy
import pickle

from gpulease.policy import decide
from tests.test_policy_fixtures import catalog, cluster, offering, stack


def test_the_decision_carries_its_fallback_types_through_pickle_and_copy():
    cat = catalog([offering("aws", "us-east-1", "a.one", od=9.0, spot=4.0),
                   offering("aws", "us-east-1", "a.two", od=9.0, spot=4.0),
                   offering("aws", "us-east-1", "a.dear", od=11.0, spot=3.0),
                   offering("aws", "us-east-1", "a.nospot", od=9.0, spot=None),
                   offering("aws", "us-east-1", "a.other", gpn=4, od=8.0, spot=2.0)])
    env = decide(stack([cluster("c", hours=200)], clouds={"aws": ("us-east-1",)}), cat)
    d = env.clusters[0]
    # the decided type first; then those not dearer on demand, with a spot price, the same
    # GPUs per node (cheapest on demand first, then by name)
    others = {"a.one": ("a.two",), "a.two": ("a.one",), "a.nospot": ("a.one", "a.two")}
    assert d.fallback_types == (d.offering.instance_type, *others[d.offering.instance_type])
    assert pickle.loads(pickle.dumps(d)).fallback_types == d.fallback_types
    assert copy.deepcopy(d).fallback_types == d.fallback_types
