"""Serving (issue 24, in progress): the load client (load.py) and its metrics (metrics.py) against any
OpenAI-compatible endpoint. Not a registered workload yet: the server launch, the planner's keys and the report
page come next."""
