"""Resolve CloudFormation intrinsic functions the way a deployment would, against sandbox resources."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

# Marks a value that `!Ref AWS::NoValue` removed (from a mapping or a list).
_NO_VALUE = object()
_SUB_VARIABLE = re.compile(r"\$\{([^}!][^}]*)\}")


# A String parameter that takes whole numbers only (a Number takes fractions too) states the range its
# AllowedPattern spells out in its ConstraintDescription: "whole seconds from 300 to 31536000 (365 days)".
_WHOLE_RANGE = re.compile(r"\bwhole\b[^0-9]*\bfrom (\d+) to (\d+)\b")
_WHOLE_NUMBER = re.compile(r"0|[1-9][0-9]*")


class UnsupportedIntrinsic(ValueError):
    """The template uses an intrinsic function (or a form of one) the sandbox cannot resolve."""


class ParameterError(ValueError):
    """A parameter value the template's constraints refuse: CloudFormation rejects the stack for it."""


def check_parameters(
    template: Mapping[str, Any], overrides: Mapping[str, str], *, min_values: bool = True
) -> None:
    """Refuse, as CloudFormation does before it creates anything, an override of an undeclared parameter or
    a value that breaks its parameter's Type, AllowedValues, AllowedPattern, MinValue, MaxValue, MinLength
    or MaxLength. The message names the parameter, the value and the constraint.

    ``min_values=False`` accepts a number below its MinValue, or a whole number below the range a whole-number
    String states (only that): a campaign that compresses minutes into seconds sets timeouts below what AWS
    allows."""
    declared = template.get("Parameters") or {}
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise ParameterError(
            f"the template declares no parameter {', '.join(unknown)} (it has: {', '.join(sorted(declared))})"
        )
    for name, spec in declared.items():
        if name in overrides:
            _check_value(name, spec, str(overrides[name]), min_values=min_values)


def whole_numbers(spec: Mapping[str, Any]) -> range | None:
    """The whole numbers a String parameter takes, as its ConstraintDescription states them ("whole seconds
    from 0 to 900"); None for any other parameter."""
    if str(spec.get("Type", "String")) != "String" or "AllowedPattern" not in spec:
        return None
    stated = _WHOLE_RANGE.search(str(spec.get("ConstraintDescription", "")))
    return range(int(stated[1]), int(stated[2]) + 1) if stated else None


def _check_value(name: str, spec: Mapping[str, Any], value: str, *, min_values: bool) -> None:
    def refuse(what: str) -> ParameterError:
        hint = f" ({spec['ConstraintDescription']})" if spec.get("ConstraintDescription") else ""
        return ParameterError(f"parameter {name}={value!r} is not valid: {what}{hint}")

    whole = whole_numbers(spec)
    if not min_values and whole is not None and _WHOLE_NUMBER.fullmatch(value) and int(value) < whole.start:
        return

    kind = str(spec.get("Type", "String"))
    if kind == "Number":
        try:
            number = float(value)
        except ValueError:
            raise refuse("it must be a number (Type: Number)") from None
        if min_values and "MinValue" in spec and number < float(spec["MinValue"]):
            raise refuse(f"it must be a number not less than {spec['MinValue']} (MinValue)")
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            raise refuse(f"it must be a number not greater than {spec['MaxValue']} (MaxValue)")
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in [str(v) for v in allowed]:
        raise refuse(f"it must be one of {', '.join(str(v) for v in allowed)} (AllowedValues)")
    pattern = spec.get("AllowedPattern")
    # A list's pattern holds for each of its values (CloudFormation splits it at its commas first)
    values = value.split(",") if kind == "CommaDelimitedList" else [value]
    if pattern is not None and any(re.fullmatch(str(pattern), v) is None for v in values):
        if "ConstraintDescription" in spec:
            # (as CloudFormation says it: "failed to satisfy constraint: <ConstraintDescription>")
            raise ParameterError(
                f"parameter {name}={value!r} is not valid: it must be {spec['ConstraintDescription']} (AllowedPattern)"
            )
        raise refuse(f"it must match the pattern {pattern} (AllowedPattern)")
    if "MinLength" in spec and len(value) < int(spec["MinLength"]):
        raise refuse(f"it must contain at least {spec['MinLength']} characters (MinLength)")
    if "MaxLength" in spec and len(value) > int(spec["MaxLength"]):
        raise refuse(f"it must contain at most {spec['MaxLength']} characters (MaxLength)")


def check_rules(template: Mapping[str, Any], overrides: Mapping[str, str]) -> None:
    """Refuse, as CloudFormation does before it creates anything, parameters that break one of the template's
    Rules (each rule's Assertions hold when its RuleCondition does; the parameters' defaults fill what is not
    given). The rule functions of the template are evaluated: Fn::Equals, Fn::Not, Fn::And, Fn::Or,
    Fn::Contains and Ref; another raises ``UnsupportedIntrinsic`` rather than pass unchecked."""
    declared = template.get("Parameters") or {}
    given = {name: str(spec["Default"]) for name, spec in declared.items() if "Default" in spec}
    given |= {name: str(value) for name, value in overrides.items()}
    values: dict[str, str | list[str]] = {
        name: _list_members(value) if _is_list(declared.get(name) or {}) else value
        for name, value in given.items()
    }
    for name, rule in (template.get("Rules") or {}).items():
        if "RuleCondition" in rule and not _rule_value(rule["RuleCondition"], values):
            continue
        for assertion in rule.get("Assertions") or []:
            if not _rule_value(assertion["Assert"], values):
                why = assertion.get("AssertDescription", "its assertion does not hold")
                raise ParameterError(f"the parameters break rule {name}: {why}")


def _is_list(spec: Mapping[str, Any]) -> bool:
    kind = str(spec.get("Type", ""))
    return kind == "CommaDelimitedList" or kind.startswith("List<")


def _list_members(value: str) -> list[str]:
    """A list parameter's value as CloudFormation makes it: split at its commas, "each member string is
    space-trimmed" (Parameters, CommaDelimitedList), "" one empty member."""
    return [member.strip() for member in value.split(",")]


def _rule_value(value: Any, parameters: Mapping[str, str | list[str]]) -> Any:
    if not isinstance(value, dict):
        return value
    ((key, argument),) = value.items()
    if key == "Ref":
        if argument not in parameters:
            raise ParameterError(f"a rule refers to {argument!r}, which has no value")
        return parameters[argument]
    items = [_rule_value(item, parameters) for item in argument] if isinstance(argument, list) else []
    if key == "Fn::Equals":
        return str(items[0]) == str(items[1])
    if key == "Fn::Not":
        return not items[0]
    if key == "Fn::And":
        return all(items)
    if key == "Fn::Or":
        return any(items)
    if key == "Fn::Contains":
        return str(items[1]) in [str(v) for v in _members(items[0], key)]
    if key == "Fn::EachMemberEquals":
        return all(str(v) == str(items[1]) for v in _members(items[0], key))
    if key == "Fn::EachMemberIn":
        return set(map(str, _members(items[0], key))) <= set(map(str, _members(items[1], key)))
    raise UnsupportedIntrinsic(f"the sandbox does not evaluate the rule function {key}")


def _members(value: Any, function: str) -> list[Any]:
    """A rule function's list argument: a list parameter's Ref, or a literal list (a string is not one)."""
    if not isinstance(value, list):
        raise ParameterError(f"a rule's {function} needs a list, got {value!r}")
    return value


class ResourceResolver(Protocol):
    """Physical values of the template's resources: `Ref` and `Fn::GetAtt`."""

    def ref(self, logical_id: str) -> str: ...

    def get_att(self, logical_id: str, attribute: str) -> str: ...


class Intrinsics:
    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        resources: ResourceResolver,
        stack_name: str,
        region: str,
        account: str,
        parameters: Mapping[str, str] | None = None,
        min_values: bool = True,
    ) -> None:
        self._template = template
        self._resources = resources
        self._min_values = min_values
        self._pseudo = {
            "AWS::StackName": stack_name,
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": f"arn:aws:cloudformation:{region}:{account}:stack/{stack_name}/sandbox",
            "AWS::NotificationARNs": "",
        }
        self._parameters = self._parameter_values(parameters or {})
        self._conditions: dict[str, bool] = {}
        self._in_conditions = 0  # > 0 while a condition is evaluated: no resource may be referred to there

    def _parameter_values(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        declared = self._template.get("Parameters") or {}
        check_parameters(self._template, overrides, min_values=self._min_values)
        values: dict[str, Any] = {}
        for name, spec in declared.items():
            if name in overrides:
                value = overrides[name]
            elif "Default" in spec:
                value = spec["Default"]
            else:
                continue
            # List parameters are given as comma-separated strings and Ref to a list.
            is_list = _is_list(spec)
            values[name] = _list_members(str(value)) if is_list and not isinstance(value, list) else value
        return values

    # -- public ---------------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        resolved = self._resolve(value)
        return None if resolved is _NO_VALUE else resolved

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            conditions = self._template.get("Conditions") or {}
            if name not in conditions:
                raise ValueError(f"unknown condition {name!r}")
            self._in_conditions += 1
            try:
                self._conditions[name] = bool(self._resolve(conditions[name]))
            finally:
                self._in_conditions -= 1
        return self._conditions[name]

    def parameter(self, name: str) -> Any:
        if name not in self._parameters:
            raise ValueError(f"parameter {name!r} has no value (no Default and no override)")
        return self._parameters[name]

    # -- the functions --------------------------------------------------------------------------

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            items = [self._resolve(item) for item in value]
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self._ref(argument)
            if key == "Condition":
                return self.condition(argument)
            if key.startswith("Fn::"):
                return self._function(key, argument)
        resolved = {k: self._resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name in self._pseudo:
            return self._pseudo[name]
        if name in (self._template.get("Parameters") or {}):
            return self.parameter(name)
        self._check_outside_conditions(name)
        return self._resources.ref(name)

    def _check_outside_conditions(self, logical_id: str) -> None:
        """CloudFormation evaluates conditions before it creates anything: "Template format error: Unresolved
        dependencies [X]. Cannot reference resources in the Conditions block of the template"."""
        if self._in_conditions:
            raise ValueError(
                f"Template format error: Unresolved dependencies [{logical_id}]. Cannot reference resources in the "
                "Conditions block of the template"
            )

    def _function(self, key: str, argument: Any) -> Any:
        if key == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            self._check_outside_conditions(str(logical_id))
            return self._resources.get_att(self._resolve(logical_id), self._resolve(attribute))
        if key == "Fn::Sub":
            return self._sub(argument)
        if key == "Fn::If":
            name, when_true, when_false = argument
            return self._resolve(when_true if self.condition(name) else when_false)
        if key == "Fn::Equals":
            left, right = (self._resolve(a) for a in argument)
            return str(left) == str(right)
        if key == "Fn::Not":
            return not self._resolve(argument[0])
        if key == "Fn::And":
            return all(self._resolve(a) for a in argument)
        if key == "Fn::Or":
            return any(self._resolve(a) for a in argument)
        if key == "Fn::Join":
            separator, items = argument
            joined = self._resolve(items)
            if not isinstance(joined, list) or any(isinstance(item, (list, dict)) for item in joined):
                raise ValueError(
                    "Template error: every Fn::Join object requires two parameters, (1) a string delimiter and (2) a "
                    f"list of strings to be joined (got {joined!r})"
                )
            return str(separator).join(str(item) for item in joined)
        if key == "Fn::Select":
            index, items = argument
            return self._resolve(items)[int(self._resolve(index))]
        if key == "Fn::Split":
            separator, text = argument
            return str(self._resolve(text)).split(separator)
        if key == "Fn::FindInMap":
            mapping, top, second = (self._resolve(a) for a in argument)
            return self._template["Mappings"][mapping][top][second]
        raise UnsupportedIntrinsic(f"the sandbox does not resolve {key} (value: {argument!r})")

    def _sub(self, argument: Any) -> str:
        if isinstance(argument, list):
            text, variables = argument[0], {k: self._resolve(v) for k, v in argument[1].items()}
        else:
            text, variables = argument, {}
        if not isinstance(text, str):
            raise UnsupportedIntrinsic(f"Fn::Sub needs a string template, got {text!r}")

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                value = variables[name]
            elif "." in name and not name.startswith("AWS::"):
                logical_id, attribute = name.split(".", 1)
                self._check_outside_conditions(logical_id)
                value = self._resources.get_att(logical_id, attribute)
            else:
                value = self._ref(name)
            if isinstance(value, (list, dict)):
                # (a list parameter is joined with Fn::Join first)
                raise ValueError(
                    f"Template error: variable {name} in Fn::Sub expression does not resolve to a string"
                )
            return str(value)

        # "${!Literal}" is CloudFormation's escape for a literal "${Literal}".
        return _SUB_VARIABLE.sub(replace, text).replace("${!", "${")
