"""``make soak``: a light, steady agent-loop load for a long time, with the memory of every
service sampled throughout, to show that the stores and caches are bounded."""
