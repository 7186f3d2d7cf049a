"""What the schema cannot say about the ``admission`` section and the tenants' class caps."""

from __future__ import annotations

from collections.abc import Mapping

from turnout.admission.settings import AdmissionSettings


def admission_problems(
    settings: AdmissionSettings, tenant_caps: Mapping[str, str | None]
) -> list[str]:
    """Each problem as ``key: why`` (empty: none). ``tenant_caps``: tenant name -> its
    ``max_class``."""
    problems: list[str] = []
    names = [cls.name for cls in settings.classes]
    if not names:
        problems.append("admission.classes: at least one class is needed")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        problems.append(f"admission.classes: {twice} listed more than once")
    total = sum(cls.share for cls in settings.classes)
    if total > 1.0 + 1e-9:
        problems.append(f"admission.classes: the shares add up to {total:g}, more than 1")
    held = sum(cls.hold for cls in settings.classes)
    if held >= 1.0:
        problems.append(f"admission.classes: the holds add up to {held:g}; keep them below 1")
    known = ", ".join(names)
    for key, name in (("default_class", settings.default_class), ("max_class", settings.max_class)):
        if name not in names:
            problems.append(f"admission.{key}: {name!r} is not a class (classes: {known})")
    for tenant, cap in tenant_caps.items():
        if cap is not None and cap not in names:
            problems.append(
                f"tenants.{tenant}.max_class: {cap!r} is not a class (classes: {known})"
            )
    return problems
