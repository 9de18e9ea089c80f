import gc
import sys
import threading

import pytest

from parity.loadgen import gc_hold


@pytest.fixture(autouse=True)
def _restore():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_held_turns_the_collector_off_and_back_on_and_leaves_a_freeze_alone():
    gc.freeze()  # as the CLI does with its imports (parity.__main__): not ours to thaw
    frozen = gc.get_freeze_count()
    assert frozen > 0
    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(phase))
    try:
        with gc_hold.held():
            assert not gc.isenabled()
            collections.clear()  # the one collection on entry is done
            junk = []
            for _ in range(20000):  # cycles enough to trigger gen-0 collections many times over
                a: list = []
                a.append(a)
                junk.append(len(a))
            assert collections == []  # none ran while held
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.callbacks.pop()
        gc.unfreeze()


def test_an_error_inside_still_undoes_it():
    with pytest.raises(KeyError), gc_hold.held():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with gc_hold.held():
        assert not gc.isenabled()
    assert not gc.isenabled()


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
    assert gc.isenabled()


def test_the_switch_interval_is_short_while_held_and_back_after():
    was = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    try:
        with gc_hold.held():
            assert sys.getswitchinterval() == pytest.approx(gc_hold.SWITCH_S, rel=0.01) and gc_hold.SWITCH_S < 0.001
            with gc_hold.held():  # a second arm: still short
                pass
            assert sys.getswitchinterval() == pytest.approx(gc_hold.SWITCH_S, rel=0.01)
        assert sys.getswitchinterval() == pytest.approx(0.004, rel=0.01)
        with pytest.raises(KeyError), gc_hold.held():
            raise KeyError("x")
        assert sys.getswitchinterval() == pytest.approx(0.004, rel=0.01)
    finally:
        sys.setswitchinterval(was)
