"""The traffic backends behind :func:`crosstraffic.get_backend` (``backend.BACKENDS`` names them):
``builtin`` (vrgen/vrsink), ``iperf3``, ``ditg`` (D-ITG) and ``trafgen`` (netsniff-ng)."""
