"""The paper-004 Fig. 1 testbed: its topology as data and the builder of its namespaces."""
