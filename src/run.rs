//! `mcm run`: the controllers against a real cluster.
