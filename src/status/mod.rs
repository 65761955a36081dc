//! `mcm status` (`docs/status.md`): the machine tree MachineDeployment -> MachineSet -> Machine -> VM and Node of
//! both flavours at a glance, each object with the one thing that explains its state.
//!
//! - [`inventory`]: the objects, one list per kind, from a cluster or a file of objects;
//! - [`model`]: the tree, both flavours through the hub (`crate::convert`), judged once; also the `-o json|yaml`
//!   schema;
//! - [`explain`]: what explains an object's state, by a fixed precedence, with MCM's deadlines (`lifecycle`'s);
//! - [`render`]: the text tree (healthy siblings folded, colours on request) and JSON/YAML;
//! - [`live`]: the lists and watches against a cluster.
//!
//! Everything but [`live`] is pure: objects and `now` in, text out.

pub mod explain;
pub mod inventory;
pub mod live;
pub mod model;
pub mod render;

pub use inventory::{Inventory, InventoryError};
pub use model::{Options, Report, build};
pub use render::TextOptions;
