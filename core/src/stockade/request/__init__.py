"""The values that travel: a request, its resolved spec, verdicts, the launch plan, the result,
and the admitted step between deciding and doing; and their one wire format (:mod:`.wire`).

Imports nothing of Stockade but :mod:`stockade.errors`.
"""
