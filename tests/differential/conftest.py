"""Collects the worst relative error of passing comparisons and prints, at the end of the run,
how many cases failed per feature tag (the tags are in the test ids)."""

import collections

import pytest

WORST = {}


@pytest.fixture
def worst_errors():
    return WORST


def pytest_terminal_summary(terminalreporter):
    failed = terminalreporter.stats.get("failed", [])
    passed = terminalreporter.stats.get("passed", [])
    by_feature, all_cases = collections.Counter(), collections.Counter()
    for rep in failed + passed:
        tags = rep.nodeid.rsplit(":", 1)[-1].rstrip("]").split(",")
        all_cases.update(tags)
        if rep in failed:
            by_feature.update(tags)
    if WORST:
        terminalreporter.write_line("worst relative error of passing cases: " + ", ".join(
            f"{k} {v:.3g}" for k, v in sorted(WORST.items())))
    if failed:
        terminalreporter.write_line(f"failed cases by feature ({len(failed)} failed):")
        for tag, n in sorted(by_feature.items(), key=lambda kv: (-kv[1], kv[0])):
            terminalreporter.write_line(f"  {tag:24s} {n:4d} of {all_cases[tag]}")
