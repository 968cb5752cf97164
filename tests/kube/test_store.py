"""The emulator's store on its own: the copies it hands out and keeps, and its resource types."""

from .store import Store, _clone

NS = "default"


def test_objects_are_copied_in_and_out_so_no_caller_changes_what_is_stored() -> None:
    """Changing a created body, or an object the store handed out, leaves the stored one as it
    was, lists and annotations included."""
    body = {"metadata": {"name": "web", "labels": {"app": "web"}}, "data": {"keys": ["a"]}}
    store = Store()
    created = store.create("v1/configmaps", body, namespace=NS)
    created["data"]["keys"].append("x")
    body["metadata"]["labels"]["app"] = "changed"
    body["data"]["keys"].append("b")
    got = store.get("v1/configmaps", NS, "web")
    got["metadata"]["labels"]["app"] = "changed too"
    got["data"]["keys"].append("c")
    again = store.get("v1/configmaps", NS, "web")
    assert again["metadata"]["labels"] == {"app": "web"}
    assert again["data"] == {"keys": ["a"]}


def test_a_value_outside_json_is_deep_copied_too() -> None:
    """A copy shares no dict or list with its original, even one inside a tuple, and keeps
    every scalar."""
    original = {"a": [1, 2.5, {"b": None}], "c": ({"d": "e"},), "f": True}
    copied = _clone(original)
    assert copied == original
    assert copied["a"] is not original["a"]
    assert copied["a"][2] is not original["a"][2]
    assert copied["c"][0] is not original["c"][0]


def test_a_type_registered_after_a_lookup_replaces_the_one_found() -> None:
    """Registering a custom resource already looked up under the same name (as a CRD
    installed late) is what later lookups find."""
    store = Store()
    guessed = store.resource_type("x.dsec.io/v1/widgets")
    assert guessed.namespaced is None
    assert guessed.kind == "Widget"
    assert store.resource_type("x.dsec.io/v1/widgets") is guessed
    declared = store.register("x.dsec.io/v1/widgets", kind="Gadget", namespaced=False)
    assert store.resource_type("x.dsec.io/v1/widgets") is declared
