"""Collects the worst relative error of passing comparisons and prints, at the end of the run,
how many cases failed per test and feature tag (the tags are in the test ids), and per known
cause: the first of CAUSES among a failed case's tags ("none of these" needs a look)."""

import collections

import pytest

WORST = {}
# Feature tags that name the subtle conventions a failure most likely breaks, most specific
# first: per-subject lists (two or more lists), steady-state constant infusions (they stop at the
# record), the lag of an SS dose, the SS record's own parameters at a shared time.
CAUSES = ["lists>=2", "ss_const_infusion", "ss_lag", "ss_tv_params"]


@pytest.fixture
def worst_errors():
    return WORST


def case_tags(nodeid):
    """(test function, feature tags) of a generated case's test id, else None."""
    test, _, param = nodeid.split("::")[-1].partition("[")
    if ":" not in param:
        return None
    return test, param.rsplit(":", 1)[-1].rstrip("]").split(",")


def pytest_terminal_summary(terminalreporter):
    reports = [(r, r in terminalreporter.stats.get("failed", []))
               for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])]
    if WORST:
        terminalreporter.write_line("worst relative error of passing cases: " + ", ".join(
            f"{k} {v:.3g}" for k, v in sorted(WORST.items())))
    tally = collections.defaultdict(lambda: [collections.Counter(), collections.Counter()])
    for rep, failed in reports:
        if case_tags(rep.nodeid) is None:
            continue
        test, tags = case_tags(rep.nodeid)
        tally[test][0].update(tags)
        if failed:
            tally[test][1].update(tags + ["(cases)"])
    causes = collections.defaultdict(collections.Counter)
    for rep, failed in reports:
        if failed and case_tags(rep.nodeid) is not None:
            test, tags = case_tags(rep.nodeid)
            causes[test][next((c for c in CAUSES if c in tags), "none of these")] += 1
    for test, counts in sorted(causes.items()):
        terminalreporter.write_line(f"{test}: failed cases by first known cause: " + ", ".join(
            f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    for test, (seen, failed) in sorted(tally.items()):
        if failed:
            terminalreporter.write_line(
                f"{test}: {failed['(cases)']} failed cases; by feature (failed of cases):")
            for tag, n in sorted(failed.items(), key=lambda kv: (-kv[1], kv[0])):
                if tag != "(cases)":
                    terminalreporter.write_line(f"  {tag:24s} {n:4d} of {seen[tag]}")
