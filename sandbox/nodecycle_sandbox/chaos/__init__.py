"""The seeded fault campaign: scenarios on one long-running sandbox, under faults, judged by invariants.

    from nodecycle_sandbox.chaos import run_campaign
    report = run_campaign(scenarios=50, seed=1, root=project_root())
    print(report.summary())

``plan`` draws scenarios and fault plans from a seed; ``world`` runs one scenario to quiescence and records
what happened; ``invariants`` judges the record; ``campaign`` runs many and shrinks what fails;
``mutations`` checks that deliberately broken copies of the product are caught.
"""

from nodecycle_sandbox.chaos.campaign import CampaignReport, Finding, run_campaign

__all__ = ["CampaignReport", "Finding", "run_campaign"]
