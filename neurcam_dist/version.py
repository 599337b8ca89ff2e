"""The package version, in one place (the CLI, MLflow tags and pip requirements read it)."""
__version__ = "0.1.0"
