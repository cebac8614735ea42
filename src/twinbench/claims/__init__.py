"""twinbench claims: every practitioner claim of ``docs/claims.md`` (C1-C22) as an experiment with a verdict.

``core`` holds the registry and the types, ``suite`` runs a selection; one module per claim group holds each
claim's runs (or probe) and its verdict rule side by side: ``compilation`` (C1-C6), ``speed`` (C7-C9),
``multidevice`` (C10-C14), ``input`` (C15-C16), ``dynamic`` (C17-C21), ``hardware`` (C22); ``probes`` holds the small
behavioural experiments run in their own process.
"""
