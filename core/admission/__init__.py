"""Admission by priority class, fair share of token work, deadlines and engine capacity.

The parts, one job each: :mod:`.settings` (the ``admission`` config section), :mod:`.classes`
(a request's class from its header and its tenant's cap), :mod:`.fair` (the tenants' fair share
of one class's queue), :mod:`.capacity` (how many requests the engines can take, from their
pushed loads), :mod:`.drain` (measured drain rate and time to first token), :mod:`.refusals`
(the 400/429/503 answers), :mod:`.ticket` (one request's place), :mod:`.scheduler` (who is
admitted next, and who yields), :mod:`.preemption` (running a worker call that may be told to
yield), :mod:`.context` (the current request's ticket) and :mod:`.metrics`.

This package's ``__init__`` imports nothing: the config schema imports :mod:`.settings`.
"""
