"""A launch and the address sweep never reach for the same address (nodecycle.domain.eip.assign.TAKE_OWN_WITHIN):
a launch takes an unassociated address of its own only while it is younger than TAKE_OWN_WITHIN, the sweep
releases one only once it is older than its grace, and the least grace the stack takes (template.yaml's
SweepGraceSeconds, the sweeper's settings) must leave the minute between them that assign.py counts on (the seconds
between a look and a call, the whole seconds of the allocation tag, two functions' clocks). Lowering either minimum,
or raising TAKE_OWN_WITHIN, past it would let a sweep release an address a late launch has just associated (a
default VPC releases it from the live instance without a word: invariant 4)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from annotated_types import Ge

from nodecycle.cluster_settings import Sweep
from nodecycle.domain.eip.assign import TAKE_OWN_WITHIN
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import whole_numbers

ROOT = Path(__file__).resolve().parents[3]
MARGIN = timedelta(minutes=1)


def test_the_least_sweep_grace_the_template_takes_leaves_a_minute_past_what_a_launch_takes() -> None:
    taken = whole_numbers(load_template(ROOT / "template.yaml")["Parameters"]["SweepGraceSeconds"])
    assert taken is not None
    assert timedelta(seconds=taken[0]) >= TAKE_OWN_WITHIN + MARGIN


def test_the_least_sweep_grace_the_settings_take_leaves_a_minute_past_what_a_launch_takes() -> None:
    (least,) = [
        bound.ge for bound in Sweep.model_fields["sweep_grace_seconds"].metadata if isinstance(bound, Ge)
    ]
    assert isinstance(least, int)
    assert timedelta(seconds=least) >= TAKE_OWN_WITHIN + MARGIN
