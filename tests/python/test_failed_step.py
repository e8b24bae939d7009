"""FailedStep (gradcomp/torch/_failed_step.py): what the hooks do with a backward's later buckets after
one failed. An error raised on every rank at the same bucket (NonFiniteError, CollectiveMismatch) fails
the rest of that backward alike and no more; any other (a timeout, a peer failure: possibly this rank's
alone) leaves the state broken until load_state_dict()."""

import pickle

import pytest

import gradcomp
from gradcomp.torch._backwards import Backwards
from gradcomp.torch._failed_step import FailedStep


def test_an_error_on_every_rank_fails_the_rest_of_its_backward_with_its_type_and_no_more():
    f = FailedStep()
    f.raise_if_failed(3, "hook")  # nothing recorded: nothing raised
    f.record(3, gradcomp.NonFiniteError("fc2.weight: NaN at element 7 on rank 1"))
    with pytest.raises(gradcomp.NonFiniteError, match=r"hook: step 3: this bucket was not reduced.*fc2.weight"):
        f.raise_if_failed(3, "hook")
    f.record(3, gradcomp.CollectiveMismatch("a later one"))  # the first failure is the one named
    with pytest.raises(gradcomp.NonFiniteError, match="fc2.weight"):
        f.raise_if_failed(3, "hook")
    f.begin_backward()
    f.raise_if_failed(4, "hook")
    f.raise_if_failed(3, "hook")  # a new backward is clean, whatever its step number


@pytest.mark.parametrize("error", [gradcomp.TimeoutError("waited 3 s"), gradcomp.PeerFailure("closed"),
                                   gradcomp.DecodeError("bad scale"), RuntimeError("gloo: size mismatch")])
def test_an_error_that_may_be_this_ranks_alone_breaks_the_state_until_it_is_replaced(error):
    f = FailedStep()
    f.record(5, error)
    for step in (5, 6, 100):
        f.begin_backward()  # a new backward does not mend it
        with pytest.raises(gradcomp.PeerFailure, match=rf"step {step}: not reduced: this rank failed at step 5 "
                           rf"\({type(error).__name__}: .*load_state_dict"):
            f.raise_if_failed(step, "hook")
    g = pickle.loads(pickle.dumps(f))  # it pickles, and stays what it was
    with pytest.raises(gradcomp.PeerFailure):
        g.raise_if_failed(7, "hook")


def test_a_powersgd_state_unpickles_without_this_process_failure_or_agreement():
    import gradcomp.torch as gt
    s = gt.PowerSGDState(None, rank=2)
    s._failed_step.record(4, gradcomp.TimeoutError("waited 3 s"))
    s._checked = True
    t = pickle.loads(pickle.dumps(s))
    t._failed_step.raise_if_failed(5, "hook")  # nothing raised: the broken state stayed with its process
    assert t._checked is False and t.process_group is None and t._names == {}
    assert (t.rank, t.iter) == (2, 0)


def test_a_backward_begins_at_an_index_not_above_the_last_ones_and_one_without_its_last_bucket_is_counted():
    b = Backwards()
    assert b.bucket(0, False) == (True, False) and b.uncounted == 1
    assert b.bucket(1, True) == (False, False) and b.uncounted == 0     # ended by its last bucket
    assert b.bucket(1, False) == (True, False)   # bucket 0 unused and skipped: a new backward all the same
    assert b.bucket(2, False) == (False, False) and b.uncounted == 1    # its last bucket (3) is skipped too
    assert b.bucket(0, False) == (True, True)    # the next backward: the last one ended uncounted
    assert b.bucket(0, False) == (False, False)  # the same index, no end: the same backward (static_graph's
    assert b.bucket(0, True) == (False, False)   # first step hands over every bucket as index 0)
    assert b.bucket(0, True) == (True, False) and b.uncounted == 0   # after an end: backwards of one bucket
    assert b.bucket(0, True) == (True, False)


def test_the_step_count_moves_at_each_last_bucket_and_at_a_backward_that_never_had_one():
    b = Backwards()
    assert b.step(7, 0, False) == (7, 7, True)
    assert b.step(7, 1, True) == (7, 8, False)    # its last bucket: counted
    assert b.step(8, 0, False) == (8, 8, True)
    assert b.step(8, 1, False) == (8, 8, False)   # its last bucket is skipped by DDP
    assert b.step(8, 0, False) == (9, 9, True)    # so it counts when the next backward begins
