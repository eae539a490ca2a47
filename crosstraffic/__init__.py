"""Cross-traffic for vrmig: the vrgen/vrsink C tools (``crosstraffic/src``) and the Python
backends that build their command lines and parse their output.

    from crosstraffic import GenRequest, SinkRequest, TrafficError, get_backend
"""

from crosstraffic.backend import (
    DEFAULT_BACKEND,
    RATE_CONVENTION,
    Backend,
    Capabilities,
    Gap,
    GenRequest,
    GenResult,
    NotImplementedBackendError,
    OwdStats,
    SinkRequest,
    SinkResult,
    TrafficError,
    backend_class,
    backend_names,
    get_backend,
)

__all__ = [
    "DEFAULT_BACKEND",
    "RATE_CONVENTION",
    "Backend",
    "Capabilities",
    "Gap",
    "GenRequest",
    "GenResult",
    "NotImplementedBackendError",
    "OwdStats",
    "SinkRequest",
    "SinkResult",
    "TrafficError",
    "backend_class",
    "backend_names",
    "get_backend",
]
