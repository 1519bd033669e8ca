//! Grid topology of ferry: which cluster each rank is in, which clusters are private, where
//! their relays listen, and — from two process ids — which path a connection takes and which
//! side opens it.
//!
//! - [`topology`]: the TOML grid file ([`Topology::load`]) and the import of the seed's
//!   per-process "process info files" ([`topology::import_process_info`]). Errors name the
//!   file, the line and the field. A cluster may add links (rails) between its hosts; a rank's
//!   rail addresses travel in [`RAIL_ADDRS_ENV`].
//! - [`place`]: one rank's [`Placement`] (cluster, front, host, address, relay), handed from
//!   the launcher to the rank in `FERRY_GRID_PLACE`.
//! - [`path`]: the process id [`Guid`], the path choice [`path::choose`] (the path table of docs/ARCHITECTURE.md §4),
//!   the dialing side [`path::dialer`] and the `FERRY_SHOW_PATHS=1` matrix
//!   [`path::render_matrix`].
//! - [`relays`]: which of a cluster's relays each rail of a relayed connection goes through
//!   ([`relays::pick`]).
//!
//! Everything here is pure: no sockets, no clock, no environment except the one
//! `FERRY_SHOW_PATHS` helper. The relay protocol lives in `ferry-wire::relay`, the daemon in
//! `ferry-relay`, the network-namespace testbed in `ferry-testbed`; this crate must not depend
//! on any of them (they depend on it).
//!
//! ```
//! use ferry_grid::{path, Topology};
//! let grid = Topology::parse("grid.toml", r#"
//!     [[cluster]]
//!     name = "a"
//!     kind = "private"
//!     front = "a-front"
//!     public_addr = "198.18.0.10"
//!     [[cluster.host]]
//!     name = "a1"
//!     addr = "10.1.0.11"
//!     [[cluster]]
//!     name = "p"
//!     kind = "public"
//!     [[cluster.host]]
//!     name = "p1"
//!     addr = "198.18.0.21"
//! "#).unwrap();
//! let ids = grid.rank_guids();
//! assert_eq!(path::choose(&ids[0], &ids[1]), path::Path::ViaMyNat);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod path;
pub mod place;
pub mod relays;
pub mod topology;

pub use path::{Guid, Path, Side};
pub use place::{Placement, RelayAddrs, PLACE_ENV};
pub use topology::{Cluster, Host, Link, Nat, Subnet, Topology, TopologyError, RAIL_ADDRS_ENV};
