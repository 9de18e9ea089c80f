import gc
import threading

import pytest

from parity.loadgen import gc_hold


@pytest.fixture(autouse=True)
def _restore():
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def test_held_turns_the_collector_off_and_freezes_what_lives_then_undoes_both():
    keep = [[i] for i in range(1000)]  # tracked containers alive at entry
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with gc_hold.held():
        assert not gc.isenabled()
        assert gc.get_freeze_count() >= len(keep)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_an_error_inside_still_undoes_it():
    with pytest.raises(KeyError), gc_hold.held():
        raise KeyError("x")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with gc_hold.held():
        assert not gc.isenabled()
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def test_two_arms_overlapping_in_threads_keep_it_off_until_the_last_leaves():
    entered, first_left, done = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def other_arm():
        with gc_hold.held():
            entered.set()
            first_left.wait(30)
            seen["after_first_left"] = gc.isenabled()
        done.set()

    with gc_hold.held():
        t = threading.Thread(target=other_arm)
        t.start()
        assert entered.wait(30)
    first_left.set()
    assert done.wait(30)
    t.join(30)
    assert seen["after_first_left"] is False  # this arm left first; the other still held it
    assert gc.isenabled() and gc.get_freeze_count() == 0
