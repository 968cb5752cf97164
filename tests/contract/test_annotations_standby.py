"""The warm standby pool's annotations: `standby-replicas` and `standby-max-replicas`."""

from __future__ import annotations

from autoscaler.contract.annotations import PREFIX
from autoscaler.core import standby
from tests.contract.test_annotations_parse import messages, ok


def test_no_standby_annotation_means_no_pool() -> None:
    """Without `standby-replicas` the pool is a fixed 0."""
    assert ok().standby == standby.PoolConfig(cap=0, fixed=0)


def test_a_count_is_a_fixed_pool() -> None:
    """`standby-replicas: 1` keeps one warm replica, whatever the load."""
    assert ok({"standby-replicas": "1"}).standby == standby.PoolConfig(cap=0, fixed=1)


def test_auto_sizes_the_pool_up_to_the_default_cap_of_two() -> None:
    """`auto` without a cap is capped at 2 replicas."""
    assert ok({"standby-replicas": "auto"}).standby == standby.PoolConfig(cap=2)


def test_auto_takes_its_cap_from_standby_max_replicas() -> None:
    """`standby-max-replicas` is the automatic pool's cap."""
    config = ok({"standby-replicas": "auto", "standby-max-replicas": "3"})
    assert config.standby == standby.PoolConfig(cap=3)


def test_the_automatic_cap_never_exceeds_the_room_between_the_bounds() -> None:
    """With `min-replicas` 2 and `max-replicas` 3 at most one pod can ever be let out."""
    config = ok({"standby-replicas": "auto", "max-replicas": "3"})
    assert config.standby.cap == 1


def test_a_bad_value_names_the_key_the_value_and_the_rule() -> None:
    """Neither a word other than `auto` nor a negative count is a pool size."""
    for raw in ("some", "-1", "1.5", "AUTO"):
        (message,) = messages({"standby-replicas": raw})
        assert message == (
            f'{PREFIX}standby-replicas="{raw}": must be "auto" or a whole number from 0 to 10000'
        )


def test_a_pool_larger_than_any_scale_up_can_use_is_refused() -> None:
    """A count above `max-replicas` - `min-replicas` could never all be let out."""
    (message,) = messages({"standby-replicas": "9", "max-replicas": "10"})
    assert message.startswith(
        f'{PREFIX}standby-replicas="9": must be <= {PREFIX}max-replicas - {PREFIX}min-replicas (8)'
    )


def test_a_cap_without_auto_is_refused() -> None:
    """`standby-max-replicas` beside a fixed count would have no effect."""
    (message,) = messages({"standby-replicas": "1", "standby-max-replicas": "2"})
    assert message == (
        f'{PREFIX}standby-max-replicas="2": has no effect without {PREFIX}standby-replicas auto'
    )
