"""vrmig package."""
