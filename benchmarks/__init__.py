"""Benchmarks for acp-agent against the official Python SDK and a raw floor (see README.md)."""
