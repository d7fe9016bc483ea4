"""The three PATCH flavours of the Kubernetes API: JSON merge (RFC 7386), strategic merge, JSON patch (RFC 6902).

Every function returns a new document and never mutates its inputs: stored objects are shared, immutable values.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.meta import json_copy

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH)


class PatchError(ValueError):
    """The patch cannot be applied to this object (a failed ``test``, a missing path, a bad directive)."""


class PatchDecodeError(PatchError):
    """The patch is no patch of its type at all (a JSON patch that is no list of operations)."""


# kube-apiserver's answer to a JSON patch its library (evanphx/json-patch) cannot apply (handlers/patch.go,
# applyJSPatch): errors.NewGenericServerResponse(422, "", schema.GroupResource{}, "", err.Error(), 0, false), the
# generic words of a 422 with reason Invalid, no resource, no name and no cause (isUnexpectedResponse false): the
# library's words ("testing value /x failed", "... missing path ...") are not sent at all, and ``details`` is an
# empty object (every field of StatusDetails is omitempty). One that does not decode is a 400 in its words.
JSON_PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"
# (encoding/json's UnmarshalTypeError, naming the JSON type of what was sent instead of the list of operations)
_GO_JSON_TYPES = {dict: "object", str: "string", int: "number", float: "number", bool: "bool"}


def refusal(content_type: str, error: PatchError) -> errors.ApiError:
    """The API server's answer to a patch of ``content_type`` that ``error`` says cannot be applied: a JSON patch
    not applied (a failed ``test``) as kube-apiserver answers it, a generic 422 with none of the library's words
    (handlers/patch.go, applyJSPatch); a client that read them would pass here and fail on a real cluster."""
    if content_type == JSON_PATCH and isinstance(error, PatchDecodeError):
        return errors.ApiError(400, "BadRequest", str(error))
    if content_type == JSON_PATCH:
        return errors.ApiError(422, "Invalid", JSON_PATCH_NOT_APPLIED, {})
    return errors.ApiError(422, "Invalid", f"the patch could not be applied: {error}")


# Strategic merge knows, from the Go struct tags, which lists merge by a key. The sandbox serves a handful
# of types, and in all of them a list field's name decides its merge key; lists not named here are atomic.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
}
# Lists of scalars with patchStrategy=merge: the patch's values are added to the existing set.
_MERGED_SCALAR_LISTS = frozenset({"finalizers"})
_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class _Deleted:
    """Marker for a map removed by ``$patch: delete``."""


_DELETED = _Deleted()


def strategic_merge_patch(original: dict[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    merged = _merge_map(original, patch)
    if isinstance(merged, _Deleted):
        raise PatchError("a strategic merge patch cannot delete the whole object")
    return merged


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any]) -> dict[str, Any] | _Deleted:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETED
    if directive == "replace":
        replaced = _merge_map(None, {k: v for k, v in patch.items() if k != "$patch"})
        assert isinstance(replaced, dict)
        return replaced
    if directive is not None:
        raise PatchError(f"unknown patch directive {directive!r}")
    result = dict(original) if original is not None else {}
    # Deletions from scalar lists apply before the merge of the same list, as in apimachinery.
    for key, value in patch.items():
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            result[field] = [item for item in result.get(field) or [] if item not in value]
    for key, value in patch.items():
        if key.startswith(("$", _SET_ORDER)):
            continue  # directives: handled above or only about ordering
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            merged = _merge_map(current if isinstance(current, dict) else None, value)
            if isinstance(merged, _Deleted):
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            current = result.get(key)
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _fresh(element: Any) -> Any:
    """A patch element with no original counterpart, its directives stripped."""
    if isinstance(element, dict):
        merged = _merge_map(None, element)
        return {} if isinstance(merged, _Deleted) else merged
    return json_copy(element)


def _merge_list(field: str, original: list[Any], patch: list[Any]) -> list[Any]:
    if field in _MERGED_SCALAR_LISTS:
        return list(original) + [item for item in patch if item not in original]
    merge_key = _MERGE_KEYS.get(field)
    if merge_key is None or not all(isinstance(e, dict) for e in patch):
        return [_fresh(e) for e in patch]
    if any(e.get("$patch") == "replace" for e in patch):
        return [_fresh(e) for e in patch if e.get("$patch") != "replace"]
    result = list(original)
    for element in patch:
        key = element.get(merge_key)
        index = next(
            (i for i, item in enumerate(result) if isinstance(item, dict) and item.get(merge_key) == key),
            None,
        )
        if element.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            result.append(_fresh(element))
        else:
            merged = _merge_map(result[index], element)
            if not isinstance(merged, _Deleted):
                result[index] = merged
    return result


# --- JSON patch ------------------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index {index} out of range")
    return index


def _resolve(doc: Any, tokens: list[str]) -> Any:
    current = doc
    for token in tokens:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError(f"path segment {token!r} not found")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, allow_end=False)]
        else:
            raise PatchError(f"path segment {token!r} does not name a container")
    return current


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"cannot add to a scalar at {last!r}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> tuple[Any, Any]:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path segment {last!r} not found")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(f"cannot remove from a scalar at {last!r}")


def json_patch(doc: Any, operations: Any) -> Any:
    if operations is None:
        operations = []  # (JSON null decodes to no operations in Go: nothing to apply)
    if not isinstance(operations, list):
        sent = _GO_JSON_TYPES.get(type(operations), "value")
        raise PatchDecodeError(f"json: cannot unmarshal {sent} into Go value of type jsonpatch.Patch")
    result = json_copy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation {op!r}")
        kind = op["op"]
        path = _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind!r} needs a value")
        if kind == "add":
            result = _add(result, path, json_copy(op["value"]))
        elif kind == "remove":
            result, _ = _remove(result, path)
        elif kind == "replace":
            if path:
                result, _ = _remove(result, path)
            result = _add(result, path, json_copy(op["value"]))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            if kind == "move":
                result, value = _remove(result, source)
            else:
                value = json_copy(_resolve(result, source))
            result = _add(result, path, value)
        elif kind == "test":
            if not _test_holds(result, path, op):
                raise PatchError(f"test failed at {op['path']!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return result


# --- a JSON patch's test, as evanphx/json-patch (v4, kube-apiserver's) makes it -----------------------------
#
# kube-apiserver applies a JSON patch to the object as its codec encodes it (handlers/patch.go: runtime.Encode, Go's
# encoding/json), and its library compares a test's value with what is at its path as raw JSON text
# (lazyNode.equal): objects and arrays member by member, every scalar by its compacted bytes (json.Compact), never
# decoded. So a string is equal only when both sides escape it alike: Go writes non-ASCII as it is and escapes
# ``<``, ``>``, ``&``, U+2028 and U+2029 (``\u003c``...), while Python's json.dumps (the official client's) escapes
# every non-ASCII character and none of ``<>&``; and ``1.0`` is not ``1``. The sandbox compares the same way: the
# value's raw text as the request sent it (see decode_json_patch), else as json.dumps writes it.


class _RawOp(dict[str, Any]):
    """A decoded JSON patch operation that keeps its ``value`` as the request's raw text."""

    raw_value: str | None = None


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def decode_json_patch(body: bytes) -> Any:
    """The JSON patch ``body`` decoded, each operation keeping the raw text of its value. Raises ValueError
    when the body is no JSON."""
    text = body.decode("utf-8")
    decoded = json.loads(text)
    if not isinstance(decoded, list):
        return decoded
    raws = _raw_values(text)
    ops: list[Any] = []
    for op, raw in zip(decoded, raws, strict=True):
        if isinstance(op, dict):
            kept = _RawOp(op)
            kept.raw_value = raw
            op = kept
        ops.append(op)
    return ops


def _skip(text: str, at: int) -> int:
    match = _WS.match(text, at)
    assert match is not None  # (matches the empty string)
    return match.end()


def _raw_values(text: str) -> list[str | None]:
    """The raw text of each operation's ``value`` (the last one, as Go's decoder keeps it), in a valid JSON
    array."""
    at = _skip(text, 0) + 1  # (past the "[")
    found: list[str | None] = []
    at = _skip(text, at)
    while text[at] != "]":
        raw: str | None = None
        if text[at] == "{":
            at = _skip(text, at + 1)
            while text[at] != "}":
                key, at = _DECODER.raw_decode(text, at)
                at = _skip(text, _skip(text, at) + 1)  # (past the ":")
                _, end = _DECODER.raw_decode(text, at)
                if key == "value":
                    raw = text[at:end]
                at = _skip(text, end)
                at = _skip(text, at + 1) if text[at] == "," else at
            at += 1
        else:
            _, at = _DECODER.raw_decode(text, at)
        found.append(raw)
        at = _skip(text, at)
        at = _skip(text, at + 1) if text[at] == "," else at
    return found


class _Scalar(str):
    """A JSON scalar as its compacted text."""


_Tree = dict[str, "_Tree | None"] | list["_Tree | None"] | _Scalar


def _raw_tree(text: str, at: int = 0) -> tuple[_Tree | None, int]:
    """The JSON value at ``at`` with every scalar kept as its text (None for null), and where it ends."""
    at = _skip(text, at)
    if text[at] == "{":
        members: dict[str, _Tree | None] = {}
        at = _skip(text, at + 1)
        while text[at] != "}":
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, at) + 1
            members[key], at = _raw_tree(text, at)
            at = _skip(text, at)
            at = _skip(text, at + 1) if text[at] == "," else at
        return members, at + 1
    if text[at] == "[":
        items: list[_Tree | None] = []
        at = _skip(text, at + 1)
        while text[at] != "]":
            item, at = _raw_tree(text, at)
            items.append(item)
            at = _skip(text, at)
            at = _skip(text, at + 1) if text[at] == "," else at
        return items, at + 1
    _, end = _DECODER.raw_decode(text, at)
    raw = text[at:end]
    return (None if raw == "null" else _Scalar(raw)), end


def _go_tree(value: Any) -> _Tree | None:
    """A stored value as kube-apiserver's codec writes it (Go's encoding/json), scalars as their text."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(k): _go_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_tree(v) for v in value]
    return _Scalar(go_json_scalar(value))


_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def go_json_scalar(value: Any) -> str:
    """A JSON scalar as Go's encoding/json (1.22 and later) writes it: HTML characters and the line and paragraph
    separators escaped, other non-ASCII as it is, a whole float64 without a fraction."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value == 0 or 1e-6 <= abs(value) < 1e21:
            return format(Decimal(repr(value)), "f").removesuffix(".0")  # (Go's 'f' format, shortest digits)
        return repr(value).replace("e-0", "e-")  # (Go's 'e' format: 1e-07 is 1e-7)
    out = ['"']
    for ch in str(value):
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif code < 0x20 or ch in "<>&" or code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # (a lone surrogate is no UTF-8: Go writes the replacement character)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _raw_equal(stored: _Tree | None, sent: _Tree | None) -> bool:
    """lazyNode.equal: objects by their decoded keys (the same number of them), arrays item by item, scalars by
    their text."""
    if stored is None or sent is None:
        return stored is None and sent is None
    if isinstance(stored, dict):
        return (
            isinstance(sent, dict)
            and len(stored) == len(sent)
            and all(k in sent and _raw_equal(v, sent[k]) for k, v in stored.items())
        )
    if isinstance(stored, list):
        return (
            isinstance(sent, list)
            and len(stored) == len(sent)
            and all(_raw_equal(a, b) for a, b in zip(stored, sent, strict=True))
        )
    return isinstance(sent, _Scalar) and str(stored) == str(sent)


def _test_holds(doc: Any, path: list[str], op: dict[str, Any]) -> bool:
    """Whether a ``test`` holds as evanphx/json-patch (v4) judges it: a missing member of an object that is there
    reads as null, and null equals only null; else the raw comparison above."""
    raw = getattr(op, "raw_value", None)
    if raw is None:
        raw = json.dumps(op["value"])  # (what the official Python client sends)
    if path:
        parent = _resolve(doc, path[:-1])
        if isinstance(parent, dict) and path[-1] not in parent:
            return raw.strip() == "null"
    stored = _resolve(doc, path)
    return _raw_equal(_go_tree(stored), _raw_tree(raw)[0])


def apply_patch(content_type: str, original: dict[str, Any], patch: Any) -> dict[str, Any]:
    if content_type == MERGE_PATCH:
        result = merge_patch(original, patch)
    elif content_type == STRATEGIC_MERGE_PATCH:
        result = strategic_merge_patch(original, patch)
    else:
        result = json_patch(original, patch)
    if not isinstance(result, dict):
        raise PatchError("the patched object is not a JSON object")
    return result
