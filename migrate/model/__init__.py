"""The experiment's model: what the drivers, the peers and the analysis agree on, with no
behaviour of its own (imports only migrate.core and the topology)."""
