"""The work before generation: the stages, and the three pipelines that compose them."""
