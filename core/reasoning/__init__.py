"""Reasoning extraction: the public parser API and shared machinery."""

from turnout.reasoning.types import ReasoningParser, ReasoningResult, ReasoningStep

__all__ = ["ReasoningParser", "ReasoningResult", "ReasoningStep"]
