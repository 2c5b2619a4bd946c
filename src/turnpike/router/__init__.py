"""Router: the model registry, worker health, and conversation-affine worker choice."""
