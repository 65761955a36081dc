//! Pure conversions between the hub (MCM's `machine.sapcloud.io` types) and the Cluster API flavour
//! (`cluster.x-k8s.io` objects and our `infrastructure.cluster.x-k8s.io` kinds). Imports only `api` and
//! `lifecycle::names`; see `ARCHITECTURE.md` §3.

pub mod machine;
