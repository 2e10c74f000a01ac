"""Checking a serving node: smoke and acceptance checks, the measured workload (loadgen,
speed), the engine's metrics, gates, the result record and its Prometheus textfile; check is
their command line.
"""
