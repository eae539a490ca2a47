"""The experiment's model, below the drivers: what the drivers, the peers and the run share (the
scenario, its action recorder, the faults it injects, the guest's dirtying load, the routing
arguments).  It imports migrate.core, the topology, the router layer and analysis's parsers,
never the experiment above it (tests/unit/test_layout.py)."""
