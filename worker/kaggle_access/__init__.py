"""Baton's access to the Kaggle API, shared by the orchestrator's Kaggle backend and by the
self-chaining code that runs inside a kernel. Imports neither the orchestrator nor its database
or web stack, only the worker and the Kaggle client.
"""
