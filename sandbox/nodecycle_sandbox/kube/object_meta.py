"""The checks kube-apiserver makes on every object's metadata, whatever its kind, on create and on update:
label keys and values, annotation keys and the annotations' total size.

As k8s.io/apimachinery does it: ``pkg/api/validation/objectmeta.go`` (``ValidateAnnotations``,
``TotalAnnotationSizeLimitB``), ``pkg/apis/meta/v1/validation`` (``ValidateLabels``) and
``pkg/util/validation/validation.go`` (``IsQualifiedName``, ``IsValidLabelValue``, ``IsDNS1123Subdomain``).
The messages are theirs; kube-apiserver lists every problem, the sandbox its first.
"""

from __future__ import annotations

import re

from nodecycle_sandbox.kube.meta import JsonObj

# annotations: the keys' and values' bytes together
TOTAL_ANNOTATION_BYTES = 256 * 1024
NAME_MAX = 63  # a label value, the name part of a qualified name
PREFIX_MAX = 253  # a DNS subdomain: the prefix of a qualified name
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_CHARACTERS = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)


def qualified_name_problem(key: str) -> str | None:
    """What is wrong with ``key`` as a label or annotation key (None: nothing)."""
    prefix, slash, name = key.rpartition("/")
    if slash and prefix.count("/"):
        return (
            f"a qualified name {_NAME_CHARACTERS} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        )
    if slash and not prefix:
        return "prefix part must be non-empty"
    if prefix and len(prefix) > PREFIX_MAX:
        return f"prefix part must be no more than {PREFIX_MAX} characters"
    if prefix and not _SUBDOMAIN.fullmatch(prefix):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character"
        )
    if not name:
        return "name part must be non-empty"
    if len(name) > NAME_MAX:
        return f"name part must be no more than {NAME_MAX} characters"
    if not _NAME.fullmatch(name):
        return f"name part {_NAME_CHARACTERS}"
    return None


def label_value_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a label value (None: nothing; an empty value is one)."""
    if len(value) > NAME_MAX:
        return f"must be no more than {NAME_MAX} characters"
    if value and not _NAME.fullmatch(value):
        return "a valid label must be an empty string or " + _NAME_CHARACTERS.removeprefix("must ")
    return None


def metadata_problem(meta: JsonObj) -> tuple[str, str] | None:
    """The first problem of an object's labels or annotations, as (field, problem); None when there is none."""
    labels = meta.get("labels") or {}
    for key, value in labels.items():
        why = qualified_name_problem(key)
        if why is not None:
            return "metadata.labels", f"Invalid value: {key!r}: {why}"
        why = label_value_problem(str(value))
        if why is not None:
            return "metadata.labels", f"Invalid value: {value!r}: {why}"
    annotations = meta.get("annotations") or {}
    for key in annotations:
        # "The rule is QualifiedName except that case doesn't matter"
        why = qualified_name_problem(key.lower())
        if why is not None:
            return "metadata.annotations", f"Invalid value: {key!r}: {why}"
    size = sum(len(key.encode()) + len(str(value).encode()) for key, value in annotations.items())
    if size > TOTAL_ANNOTATION_BYTES:
        return "metadata.annotations", f"Too long: must have at most {TOTAL_ANNOTATION_BYTES} bytes"
    return None
