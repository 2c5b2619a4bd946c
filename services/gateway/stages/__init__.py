"""The stages before generation, each a small object with one job, in a module of its
own (in the order pipelines list them). ``base`` says what a stage is; ``keys`` holds
the content hashes two stages key by."""

from gateway.stages.base import Concurrently, Resources, Stage, Step, each_stage
from gateway.stages.load_conversation import LoadConversation
from gateway.stages.render import Render
from gateway.stages.resolve_images import ResolveImages
from gateway.stages.resolve_model import ResolveModel
from gateway.stages.route import Route
from gateway.stages.safety import Safety
from gateway.stages.validate_history import ValidateHistory

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
