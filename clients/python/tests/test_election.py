"""Elections of the blocking API: one leader, growing terms, observing changes, losing the lead."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import dlock_client


def test_one_leader_at_a_time_and_the_next_takes_over_on_resign(client: Any, key: Any) -> None:
    a, b, watcher = client(), client(), client()
    election = key("scheduler")
    assert watcher.election(election).leader() is None
    with watcher.election(election).observe() as changes:
        assert changes.get(5) is None
        lead = a.election(election, ttl=10).campaign("node-a")
        seen = changes.get(5)
        assert seen is not None and (seen.info, seen.term) == ("node-a", lead.term)
        with pytest.raises(dlock_client.NotAcquired):
            b.election(election, wait=0).campaign("node-b")
        taken: list[dlock_client.Leadership] = []
        candidate = threading.Thread(target=lambda: taken.append(b.election(election, ttl=10).campaign("node-b")))
        candidate.start()
        assert lead.resign() is True
        candidate.join(10)
        assert taken and taken[0].term > lead.term
        following = changes.get(5)
        if following is None:  # the moment between the two leaders, if it was read
            following = changes.get(5)
        assert following is not None and (following.info, following.term) == ("node-b", taken[0].term)
        with pytest.raises(TimeoutError):
            changes.get(0.3)
        with taken[0]:
            assert taken[0].is_leading and taken[0].holds()
        assert changes.get(5) is None, "resigned on leaving the with block"


def test_a_leader_deposed_by_a_force_release_is_told(client: Any, key: Any) -> None:
    a, admin_client = client(), client()
    lead = a.election(key("e"), ttl=1.5).campaign()
    assert admin_client.election(key("e")).leader() is not None
    admin_client.force_release(key("e"))
    assert lead.lost.wait(5)
    assert not lead.is_leading
    with pytest.raises(dlock_client.LeaseLost):
        lead.renew()
    assert lead.resign() is False


def test_an_observer_sees_a_leader_expire(client: Any, key: Any) -> None:
    a, watcher = client(), client()
    lead = a.election(key("e"), ttl=1.0).campaign("short")
    lead._lease.ended = True  # the leader stops renewing (as if it hung) without resigning
    with watcher.election(key("e")).observe() as changes:
        assert changes.get(5) is not None
        assert changes.get(10) is None, "the server notified the expiry"
