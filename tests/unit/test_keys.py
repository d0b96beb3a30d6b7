from pathlib import Path

from corral._keys import SCRIPT_KEY_SUFFIXES, QueueKeys


def test_default_prefix_is_bullmqs() -> None:
    keys = QueueKeys("emails")
    assert keys.base == "bull:emails"
    assert keys.wait == "bull:emails:wait"
    assert keys.job("42") == "bull:emails:42"
    assert keys.lock("42") == "bull:emails:42:lock"
    assert keys.logs("42") == "bull:emails:42:logs"


def test_bullmq_key_names() -> None:
    keys = QueueKeys("q", "p")
    assert [
        keys.active,
        keys.prioritized,
        keys.priority_counter,
        keys.delayed,
        keys.waiting_children,
        keys.completed,
        keys.failed,
        keys.marker,
        keys.events,
        keys.meta,
        keys.stalled,
        keys.stalled_check,
        keys.limiter,
        keys.id_counter,
    ] == [
        "p:q:active",
        "p:q:prioritized",
        "p:q:pc",
        "p:q:delayed",
        "p:q:waiting-children",
        "p:q:completed",
        "p:q:failed",
        "p:q:marker",
        "p:q:events",
        "p:q:meta",
        "p:q:stalled",
        "p:q:stalled-check",
        "p:q:limiter",
        "p:q:id",
    ]


def test_script_keys_follow_the_lua_order() -> None:
    keys = QueueKeys("q", "{bull}")
    assert keys.script_keys() == [f"{{bull}}:q:{s}" for s in SCRIPT_KEY_SUFFIXES]
    # include/keys.lua names KEYS[1..16] in this order; a change here must change it too.
    lua = (Path(__file__).parents[2] / "corral/_lua/include/keys.lua").read_text()
    for i, suffix in enumerate(SCRIPT_KEY_SUFFIXES, start=1):
        name = "K_" + suffix.upper().replace("-", "_")
        if suffix == "pc":
            name = "K_PC"
        assert f"local {name} = KEYS[{i}]" in lua
