"""The three PATCH content types of the Kubernetes API, applied to plain JSON documents.

- `application/merge-patch+json`: RFC 7386 (maps merge, lists are replaced, null deletes).
- `application/strategic-merge-patch+json`: like merge-patch, but lists with a merge key in the
  built-in types (`containers` by `name`, `conditions` by `type`, ...) merge item by item, and the
  `$patch`, `$deleteFromPrimitiveList/...`, `$setElementOrder/...` directives are understood.
- `application/json-patch+json`: RFC 6902 operations (via `jsonpatch`).

Pure functions: inputs are never mutated; a malformed patch raises `PatchError`.
"""

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

# Merge keys of the built-in types (the `patchMergeKey` struct tags in k8s.io/api), by field name.
# `ports` depends on its parent: a container port merges by number, a service port by `port`.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "topologySpreadConstraints": "topologyKey",
}
_CONTAINER_LISTS = {"containers", "initContainers", "ephemeralContainers"}
# Lists of scalars that merge as sets (`patchStrategy:"merge"` without a key).
_PRIMITIVE_MERGE = {"finalizers"}


class PatchError(ValueError):
    """The patch cannot be applied; `status` is the HTTP status the API server would answer."""

    def __init__(self, message: str, *, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def apply(content_type: str, document: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """Apply `patch` of `content_type` to `document` and return the new document."""
    match content_type:
        case "application/merge-patch+json":
            if not isinstance(patch, Mapping):
                raise PatchError("a merge patch must be a JSON object", status=400)
            result = merge_patch(document, patch)
        case "application/strategic-merge-patch+json":
            if not isinstance(patch, Mapping):
                raise PatchError("a strategic merge patch must be a JSON object", status=400)
            result = strategic_merge_patch(document, patch)
        case "application/json-patch+json":
            result = json_patch(document, patch)
        case _:
            raise PatchError(f"unsupported patch content type: {content_type!r}", status=415)
    if not isinstance(result, dict):
        raise PatchError("the patched document is not a JSON object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(document: Mapping[str, Any], operations: Any) -> Any:
    """RFC 6902 JSON patch; a non-list body is rejected as the API server does."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations", status=400)
    try:
        return jsonpatch.apply_patch(document, operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError) as e:
        raise PatchError(f"the JSON patch does not apply: {e}") from e


def strategic_merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Kubernetes strategic merge patch for the built-in types."""
    result = _merge_map(target, patch, ())
    return result if result is not None else {}


def _merge_key(path: tuple[str, ...], field: str) -> str | None:
    if field == "ports":
        return "containerPort" if path and path[-1] in _CONTAINER_LISTS else "port"
    return _MERGE_KEYS.get(field)


def _strip(value: Any) -> Any:
    """Remove patch directives from a value that is inserted rather than merged."""
    if isinstance(value, Mapping):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, Mapping) and "$patch" in v)]
    return value


def _merge_map(
    target: Mapping[str, Any] | None, patch: Mapping[str, Any], path: tuple[str, ...]
) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip(patch)  # type: ignore[no-any-return]
    if directive is not None:
        raise PatchError(f"unknown patch directive: {directive!r}")

    result = dict(target or {})
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = list(value or [])
            continue
        if key.startswith("$"):  # $setElementOrder/..., $retainKeys: order and pruning hints
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            current = result.get(key)
            merged = _merge_map(current if isinstance(current, Mapping) else None, value, path)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, (*path, key), key)
        else:
            result[key] = value
    for key, removed in deletions.items():
        result[key] = [item for item in result.get(key) or [] if item not in removed]
    return result


def _merge_list(current: Any, patch: list[Any], path: tuple[str, ...], field: str) -> list[Any]:
    if not isinstance(current, list):
        return _strip(patch)  # type: ignore[no-any-return]
    if any(isinstance(item, Mapping) and item.get("$patch") == "replace" for item in patch):
        return _strip(patch)  # type: ignore[no-any-return]
    if field in _PRIMITIVE_MERGE:
        return current + [item for item in patch if item not in current]
    key = _merge_key(path[:-1], field)
    if key is None:
        return _strip(patch)  # type: ignore[no-any-return]

    result = list(current)
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise PatchError(f"{'.'.join(path)}: every item must have the merge key {key!r}")
        positions = [
            i
            for i, old in enumerate(result)
            if isinstance(old, Mapping) and old.get(key) == item[key]
        ]
        if item.get("$patch") == "delete":
            result = [old for i, old in enumerate(result) if i not in positions]
        elif positions:
            merged = _merge_map(result[positions[0]], item, path)
            result[positions[0]] = merged if merged is not None else result[positions[0]]
        else:
            result.append(_strip(item))
    return result
