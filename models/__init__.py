"""Detector architectures, their registry, preprocessing and the shared decoder."""

from edgeport.models.pdet import DetectorConfig, PDet
from edgeport.models.registry import DEFAULT_ARCH, REGISTRY, arch_names, build_model

__all__ = ["DEFAULT_ARCH", "REGISTRY", "DetectorConfig", "PDet", "arch_names", "build_model"]
