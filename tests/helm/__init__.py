"""Tests of the Helm chart and the container images."""
