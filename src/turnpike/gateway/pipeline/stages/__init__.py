"""The stages before generation, each a small object with one job, in a module of its
own (in the order pipelines list them). ``base`` says what a stage is; ``keys`` holds
the content hashes two stages key by."""

from turnpike.gateway.pipeline.stages.base import Concurrently, Resources, Stage, Step, each_stage
from turnpike.gateway.pipeline.stages.load_conversation import LoadConversation
from turnpike.gateway.pipeline.stages.render import Render
from turnpike.gateway.pipeline.stages.resolve_images import ResolveImages
from turnpike.gateway.pipeline.stages.resolve_model import ResolveModel
from turnpike.gateway.pipeline.stages.route import Route
from turnpike.gateway.pipeline.stages.safety import Safety
from turnpike.gateway.pipeline.stages.validate_history import ValidateHistory

__all__ = [
    "Concurrently",
    "LoadConversation",
    "Render",
    "ResolveImages",
    "ResolveModel",
    "Resources",
    "Route",
    "Safety",
    "Stage",
    "Step",
    "ValidateHistory",
    "each_stage",
]
