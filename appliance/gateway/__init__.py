"""gateway room."""
