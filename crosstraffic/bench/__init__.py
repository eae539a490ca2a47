"""Benchmarks of the traffic tools: ``veth`` (vrgen/vrsink on a veth pair against iperf3,
``python -m crosstraffic.bench``) and ``traffic`` (every backend on an A -> bridge -> B bed,
``make bench-traffic``), with ``bed``, the bed they share with the backend tests."""
