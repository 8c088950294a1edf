"""The eager reference network of the hybrid family and its checkpoint I/O."""

from dayzero.model.config import ModelConfig
from dayzero.model.hybrid import HybridModel
from dayzero.model.weights import load

__all__ = ["HybridModel", "ModelConfig", "load"]
