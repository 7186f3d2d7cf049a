"""Reasoning extraction: the public parser API and shared machinery."""

from turnout.reasoning.base import MarkerReasoningParser
from turnout.reasoning.types import ReasoningParser, ReasoningResult, ReasoningStep

__all__ = ["MarkerReasoningParser", "ReasoningParser", "ReasoningResult", "ReasoningStep"]
