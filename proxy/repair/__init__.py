"""The repair domain: one exchange's facts, the provider profiles, the chain and its stream
loop, tenancy, conformance, and what the repairs share."""
