//! What goes wrong in a BSP computation: [`BspError`], naming the process and the BSPlib call.

use crate::record::RecordError;

/// An error of a BSP call: which process, which call (`bsp_put`, `bsp_sync`, …) and what.
///
/// Its text is `process P: bsp_CALL: what`, the form BSPlib implementations stop the job
/// with. An error from [`Bsp::sync`](crate::Bsp::sync) or [`Bsp::end`](crate::Bsp::end) leaves
/// the computation unusable (its later syncs return [`ErrorKind::Broken`]); an error of a
/// local check (a bad pid, an unregistered address, a range outside an area, a wrong tag
/// size) changes nothing, and the computation goes on.
///
/// One pointer wide, so that `Result<(), BspError>` comes back in a register: every put and
/// get returns one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("process {}: {}: {}", .0.pid, .0.call, .0.kind)]
pub struct BspError(Box<Inner>);

#[derive(Debug, Clone, PartialEq)]
struct Inner {
    pid: usize,
    call: &'static str,
    kind: ErrorKind,
}

impl BspError {
    /// The error `kind` of `call` on process `pid`.
    pub(crate) fn new(pid: usize, call: &'static str, kind: ErrorKind) -> BspError {
        BspError(Box::new(Inner { pid, call, kind }))
    }

    /// The process that found the error.
    pub fn pid(&self) -> usize {
        self.0.pid
    }

    /// The BSPlib call it belongs to (`bsp_put`, `bsp_sync`, …).
    pub fn call(&self) -> &'static str {
        self.0.call
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }
}

const _: () = assert!(size_of::<Result<(), BspError>>() == size_of::<usize>());

/// What went wrong in a BSP call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A process id outside the computation.
    #[error("process id {pid} is out of range 0..{nprocs}")]
    BadPid {
        /// The id given.
        pid: usize,
        /// Processes in the computation.
        nprocs: usize,
    },
    /// An address with no registration in effect.
    #[error("address {addr:#x} is not registered ({hint})")]
    NotRegistered {
        /// The address.
        addr: usize,
        /// Why it may look registered.
        hint: &'static str,
    },
    /// Elements outside a local area.
    #[error("elements {start}..{end} are outside the local area of {len} elements")]
    OutsideLocal {
        /// First element.
        start: usize,
        /// One past the last element (saturated).
        end: usize,
        /// Elements in the area.
        len: usize,
    },
    /// Bytes outside another process's registered area.
    #[error("bytes {start}..{end} are outside the {size}-byte area (registration #{slot}) of process {pid}")]
    OutsideRemote {
        /// The other process.
        pid: usize,
        /// The registration.
        slot: u32,
        /// First byte.
        start: usize,
        /// One past the last byte (saturated).
        end: usize,
        /// Bytes it registered.
        size: usize,
    },
    /// A BSMP tag of another length than the tag size.
    #[error("tag of {len} bytes, but the tag size is {tagsize}")]
    TagSize {
        /// Bytes of the tag given.
        len: usize,
        /// The tag size in effect.
        tagsize: usize,
    },
    /// An [`Area`](crate::Area) of another computation, or one freed already.
    #[error("the area does not belong to this computation")]
    ForeignArea,
    /// [`Bsp::free`](crate::Bsp::free) of a registered area.
    #[error("the area is still registered")]
    StillRegistered,
    /// An area larger than memory can hold.
    #[error("an area of {len} elements of {elem_bytes} bytes is too large")]
    AreaTooLarge {
        /// Elements asked for.
        len: usize,
        /// Bytes per element.
        elem_bytes: usize,
    },
    /// Another process names a registration that has no area here.
    #[error("process {from} names registration #{slot}, which is not registered here")]
    UnknownSlot {
        /// The other process.
        from: usize,
        /// The registration it named.
        slot: u32,
    },
    /// Another process writes or reads outside an area of this one.
    #[error("process {from} {access} bytes {start}..{end} of a {size}-byte area")]
    RemoteOutside {
        /// The other process.
        from: usize,
        /// "writes" or "reads".
        access: &'static str,
        /// First byte.
        start: usize,
        /// One past the last byte (saturated).
        end: usize,
        /// Bytes registered here.
        size: usize,
    },
    /// Another process sent a tag of another length than the tag size here.
    #[error("process {from} sent a tag of {len} bytes in superstep {step}, where the tag size here is {tagsize} (every process must set the same)")]
    RemoteTagSize {
        /// The other process.
        from: usize,
        /// Bytes of its tag.
        len: usize,
        /// The superstep.
        step: u64,
        /// The tag size here.
        tagsize: usize,
    },
    /// The processes did not push and pop alike in a superstep.
    #[error("registrations do not match in superstep {step}: this process did {mine}, process {from} did {theirs}")]
    RegistrationMismatch {
        /// The superstep.
        step: u64,
        /// The other process.
        from: usize,
        /// What this process did.
        mine: String,
        /// What the other did.
        theirs: String,
    },
    /// Another process is in `bsp_end` while this one syncs.
    #[error("process {from} called bsp_end in superstep {step} while this process syncs")]
    PeerEnded {
        /// The other process.
        from: usize,
        /// The superstep.
        step: u64,
    },
    /// Another process syncs while this one is in `bsp_end`.
    #[error("process {from} called bsp_sync in superstep {step}, not bsp_end")]
    PeerSyncing {
        /// The other process.
        from: usize,
        /// The superstep.
        step: u64,
    },
    /// A closing message longer than the buffer posted for it.
    #[error("the closing message from process {from} does not fit the pre-posted buffer (is FERRY_BSP_PREPOST_BYTES the same everywhere?)")]
    PrepostTooSmall {
        /// The sender.
        from: usize,
    },
    /// Bytes from another process that are not a record.
    #[error("process {from} sent bytes that are not a record: {source}")]
    Record {
        /// The sender.
        from: usize,
        /// Why they are not.
        source: RecordError,
    },
    /// ferry-core failed (a peer that died, a lost connection).
    #[error(transparent)]
    Transport(#[from] ferry_core::Error),
    /// Settings that do not parse.
    #[error("{0}")]
    Config(String),
    /// An earlier error of a sync left the computation unusable.
    #[error("the computation stopped at an earlier error: {first}")]
    Broken {
        /// That error.
        first: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_process_call_and_problem() {
        let e = BspError::new(2, "bsp_put", ErrorKind::BadPid { pid: 3, nprocs: 3 });
        assert_eq!(
            e.to_string(),
            "process 2: bsp_put: process id 3 is out of range 0..3"
        );
        let source = RecordError::UnknownVersion { found: 7 };
        let e = BspError::new(0, "bsp_sync", ErrorKind::Record { from: 1, source });
        assert!(e.to_string().contains("process 1 sent bytes"), "{e}");
        assert!(e.to_string().contains("version 0x07"), "{e}");
    }
}
