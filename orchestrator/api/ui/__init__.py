"""The web status page."""
