"""The local backend: segments run as supervised processes on this machine (sessions.py starts
them under supervisor.py), checkpoints live in a local directory."""
