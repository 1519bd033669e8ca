//! libfabric (OFI) for ferry, loaded at run time, behind a small safe API: reliable
//! datagram (`FI_EP_RDM`) endpoints, their address vector, registered memory, two-sided
//! messages, one-sided reads and writes, and completions. It knows nothing of ferry's engine;
//! `crates/core`'s fabric transport is built on it. See `README.md` beside this crate for
//! what a real NIC adds and what is left out.
//!
//! - [`Library::load`] opens `libfabric.so.1` (or `FERRY_FABRIC_LIB`) with `dlopen`: nothing
//!   links against libfabric, and where it is absent the error names the file and why.
//! - [`Library::providers`] lists the providers and domains an endpoint can be opened on.
//! - [`Endpoint::open`] opens fabric → domain → address vector and completion queue →
//!   endpoint, binds and enables them.
//! - [`Endpoint::register`] gives a [`Region`] (descriptor, key, the address a peer uses).
//! - [`Endpoint::post_recv`], [`Endpoint::send`], [`Endpoint::inject`], [`Endpoint::read`],
//!   [`Endpoint::write`] start operations; [`Endpoint::poll`] reaps their [`Completion`]s.
//! - [`Endpoint::wait_fd`] and [`Endpoint::try_wait`] let a caller sleep in epoll.
//!
//! Threading: an endpoint and its regions are driven by one thread (`FI_THREAD_DOMAIN`), so
//! none of them is `Send`.

#![deny(unsafe_op_in_unsafe_fn)]

mod endpoint;
mod error;
mod ffi;
mod info;
mod ops;
mod region;

use std::ffi::c_int;

pub use endpoint::{
    Completion, CompletionError, Desc, Endpoint, EndpointInfo, OpKind, PeerAddr, Remote,
};
pub use error::{FabricError, Result};
pub use info::{Caps, EndpointSpec, MrMode, ProviderInfo};
pub use region::{Access, Region};

/// The library file opened when `FERRY_FABRIC_LIB` is not set.
pub const DEFAULT_LIBRARY: &str = "libfabric.so.1";
/// The environment variable naming another library file (a path).
pub const LIBRARY_ENV: &str = "FERRY_FABRIC_LIB";

/// libfabric, loaded. Cheap to clone; the library stays loaded for the life of the process.
#[derive(Clone)]
pub struct Library {
    calls: ffi::Calls,
    path: String,
    version: u32,
}

impl Library {
    /// Loads `FERRY_FABRIC_LIB` if set, else `libfabric.so.1`, and checks its version.
    pub fn load() -> Result<Library> {
        let path = std::env::var(LIBRARY_ENV)
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_string());
        Library::load_from(&path)
    }

    /// Loads the library at `path` (a file name the dynamic linker searches, or a path).
    pub fn load_from(path: &str) -> Result<Library> {
        let calls = ffi::load(path).map_err(|failure| match failure {
            ffi::LoadFailure::Open(reason) => FabricError::Load {
                path: path.to_string(),
                reason,
            },
            ffi::LoadFailure::Symbol(symbol, reason) => FabricError::Symbol {
                path: path.to_string(),
                symbol,
                reason,
            },
        })?;
        // SAFETY: fi_version takes nothing and returns a number.
        let version = unsafe { (calls.version)() };
        if version < ffi::API_VERSION {
            return Err(FabricError::Version {
                path: path.to_string(),
                found: version_text(version),
                needed: version_text(ffi::API_VERSION),
            });
        }
        Ok(Library {
            calls,
            path: path.to_string(),
            version,
        })
    }

    /// The library's API version, (major, minor).
    pub fn version(&self) -> (u32, u32) {
        (self.version >> 16, self.version & 0xffff)
    }

    /// The file it was loaded from, as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The providers and domains [`Endpoint::open`] could use under `spec`'s filters, best
    /// first (libfabric's order), without repeats (libfabric lists a provider once per
    /// variant of attributes not shown here); empty when none.
    pub fn providers(&self, spec: &EndpointSpec) -> Result<Vec<ProviderInfo>> {
        let list = info::get_info(self, spec)?;
        let mut found: Vec<ProviderInfo> = Vec::new();
        for entry in list.matching(spec) {
            // SAFETY: an entry of the live list.
            let entry = unsafe { ProviderInfo::read(entry) };
            if !found.contains(&entry) {
                found.push(entry);
            }
        }
        Ok(found)
    }

    pub(crate) fn calls(&self) -> &ffi::Calls {
        &self.calls
    }

    /// libfabric's text for an error code (positive or negated).
    pub(crate) fn strerror(&self, code: c_int) -> String {
        // SAFETY: fi_strerror returns a static string for any code.
        unsafe { info::text((self.calls.strerror)(code.abs())) }
    }

    /// The error of a call that returned `rc` < 0.
    pub(crate) fn call_error(&self, call: &'static str, rc: isize) -> FabricError {
        let code = rc.unsigned_abs().min(c_int::MAX as usize) as c_int;
        FabricError::Call {
            call,
            code,
            text: self.strerror(code),
        }
    }
}

fn version_text(version: u32) -> String {
    format!("{}.{}", version >> 16, version & 0xffff)
}

#[cfg(test)]
mod tests;
