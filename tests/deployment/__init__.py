"""Checks of the deployment files (docker/), without running them."""
