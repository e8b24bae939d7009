"""The DDP hook and the FSDP2 reduce-scatter in spawned gloo groups of 1, 2 and 4 ranks (see
distributed_checks.py: one spawn per world size runs every check, each reported here as its own test)."""

import pytest

import distributed_checks as dc


@pytest.fixture(scope="module")
def results():
    """Each world size's spawn runs when its first test asks (inside that test's timeout), once: a spawn
    that raised (pytest's timeout, say) fails that world's later tests with its error, not a new spawn."""
    spawned: dict[int, object] = {}

    def of(world: int) -> dict[str, list[str]]:
        if world not in spawned:
            try:
                spawned[world] = dc.run_checks(world)
            except BaseException as e:
                spawned[world] = e
                raise
        got = spawned[world]
        if isinstance(got, BaseException):
            raise RuntimeError(f"the spawn of {world} ranks failed in an earlier test: {got!r}")
        return got
    return of


@pytest.mark.parametrize("world,name", [(w, n) for n, (_, ws) in dc.CHECKS.items() for w in ws])
def test_distributed(results, world, name):
    failures = results(world)[name]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world", (1, 2, 4))
def test_the_spawn_ends_cleanly(results, world):
    # every rank exits 0 (no abort at teardown, no timeout at a barrier between checks)
    failures = results(world)[dc.SPAWN]
    assert not failures, "\n".join(failures)
