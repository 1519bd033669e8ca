//! Operations on an endpoint and their completions. Every operation carries a context the
//! crate owns (a `struct fi_context` the provider may use, `FI_CONTEXT` mode, followed by the
//! caller's number); its completion hands the number back.

use std::collections::HashMap;
use std::ffi::c_void;
use std::io::IoSlice;

use crate::endpoint::{Desc, Endpoint, PeerAddr, Remote};
use crate::error::{FabricError, Result};
use crate::ffi;
use crate::info;

/// Completion entries read per `fi_cq_read`.
pub(crate) const CQ_BATCH: usize = 64;
/// Batches one [`Endpoint::poll`] reads at most, so that a busy queue cannot keep it.
const POLL_ROUNDS: usize = 16;
/// Buffers one send takes at most.
const MAX_SEND_PARTS: usize = 2;

/// What an operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Send,
    Recv,
    Read,
    Write,
}

/// A failed operation, as the completion queue's error entry says.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text} (-{code}; provider: {provider_text}, {provider_errno})")]
pub struct CompletionError {
    /// The libfabric error (`FI_ETRUNC` 265, `FI_ECANCELED`, an errno, …), positive.
    pub code: i32,
    /// libfabric's text for `code` (`fi_strerror`).
    pub text: String,
    /// The provider's own error number; its meaning is the provider's (tcp;ofi_rxm gives
    /// `EINPROGRESS` with a truncation).
    pub provider_errno: i32,
    /// The provider's text for it (`fi_cq_strerror`), "" when it has none.
    pub provider_text: String,
    /// For a truncated receive, the bytes that did not fit (`olen`).
    pub overflow: usize,
}

impl CompletionError {
    /// The message was longer than the posted receive buffer.
    pub fn is_truncation(&self) -> bool {
        self.code == ffi::FI_ETRUNC
    }
}

/// One finished operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The caller's number given when the operation was started.
    pub context: u64,
    pub kind: OpKind,
    /// Bytes received (receives) or the operation's length (others), or why it failed.
    pub result: std::result::Result<usize, CompletionError>,
}

/// The context of one operation in flight. `repr(C)` with the provider's area first: the
/// pointer libfabric gets and gives back is the slot's.
#[repr(C)]
struct Slot {
    /// Room for `struct fi_context2` (8 pointers), more than `FI_CONTEXT` needs (4).
    provider: [*mut c_void; 8],
    user: u64,
    len: usize,
    kind: OpKind,
    busy: bool,
}

/// The slots, each boxed so that its address stays put while the vector grows.
#[derive(Default)]
pub(crate) struct Contexts {
    // Boxed on purpose: libfabric holds pointers to slots while the vector grows.
    #[allow(clippy::vec_box)]
    slots: Vec<Box<Slot>>,
    /// Each slot's index by its address: how a completion's context is recognized without
    /// reading through a pointer that might not be ours.
    by_address: HashMap<usize, usize>,
    free: Vec<usize>,
}

impl Contexts {
    fn take(&mut self, user: u64, len: usize, kind: OpKind) -> (usize, *mut c_void) {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Box::new(Slot {
                provider: [std::ptr::null_mut(); 8],
                user: 0,
                len: 0,
                kind,
                busy: false,
            }));
            let index = self.slots.len() - 1;
            let address = &*self.slots[index] as *const Slot as usize;
            self.by_address.insert(address, index);
            index
        });
        let slot = &mut self.slots[index];
        slot.user = user;
        slot.len = len;
        slot.kind = kind;
        slot.busy = true;
        (index, (&mut **slot as *mut Slot).cast())
    }

    fn release(&mut self, index: usize) {
        self.slots[index].busy = false;
        self.free.push(index);
    }

    /// The slot a completion's `op_context` points at, released; None for a pointer that is
    /// not one of ours in flight.
    fn finish(&mut self, context: *mut c_void) -> Option<(u64, usize, OpKind)> {
        let index = *self.by_address.get(&(context as usize))?;
        let slot = &self.slots[index];
        if !slot.busy {
            return None;
        }
        let found = (slot.user, slot.len, slot.kind);
        self.release(index);
        Some(found)
    }

    /// Operations in flight.
    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl Endpoint {
    /// Starts an operation through `post` with a fresh context: Ok(true) when posted,
    /// Ok(false) on `-FI_EAGAIN` (progress with [`Endpoint::poll`] and retry).
    fn start(
        &mut self,
        call: &'static str,
        kind: OpKind,
        user: u64,
        len: usize,
        post: impl FnOnce(*mut c_void) -> isize,
    ) -> Result<bool> {
        let (index, context) = self.shared.contexts.borrow_mut().take(user, len, kind);
        let rc = post(context);
        if rc == 0 {
            return Ok(true);
        }
        self.shared.contexts.borrow_mut().release(index);
        if rc == -(ffi::FI_EAGAIN as isize) {
            return Ok(false);
        }
        Err(self.shared.lib.call_error(call, rc))
    }

    fn check_len(&self, len: usize) -> Result<()> {
        let max = self.info.provider.max_msg_size;
        if len > max {
            return Err(FabricError::Invalid(format!(
                "a message of {len} bytes exceeds the endpoint's maximum of {max}"
            )));
        }
        Ok(())
    }

    /// Refuses a missing descriptor where the domain needs one (`FI_MR_LOCAL`): the provider
    /// would fail the operation later, or worse.
    fn check_descs(&self, descs: &[Desc], buffers: usize) -> Result<()> {
        if self.shared.mr_mode.local()
            && (descs.len() < buffers || descs.iter().any(|d| d.0.is_null()))
        {
            return Err(FabricError::Invalid(
                "this domain (FI_MR_LOCAL) needs each local buffer's region descriptor".into(),
            ));
        }
        Ok(())
    }

    /// Posts a receive of up to `len` bytes into `buf` (`fi_recv`, from any peer).
    ///
    /// # Safety
    /// `buf..buf+len` is writable and stays valid, and not otherwise accessed, until this
    /// operation's completion is polled or the endpoint is dropped. `desc` is the descriptor
    /// of a live region covering it (or [`Desc::NONE`] without `FI_MR_LOCAL`).
    pub unsafe fn post_recv(
        &mut self,
        buf: *mut u8,
        len: usize,
        desc: Desc,
        context: u64,
    ) -> Result<bool> {
        self.check_descs(&[desc], 1)?;
        let ep = self.shared.ep;
        // SAFETY: the endpoint is live; the buffer is the caller's contract; the context
        // lives in Shared, which outlives the endpoint's close.
        self.start("fi_recv", OpKind::Recv, context, len, |ctx| unsafe {
            ffi::recv(ep, buf.cast(), len, desc.0, ctx)
        })
    }

    /// Sends `parts` (at most 2, together one message) to `peer` (`fi_sendv`).
    ///
    /// # Safety
    /// The parts' memory stays valid and unchanged until this operation's completion is
    /// polled or the endpoint is dropped (a NIC reads it directly). `descs` has one
    /// descriptor per part (or is empty without `FI_MR_LOCAL`).
    pub unsafe fn send(
        &mut self,
        peer: PeerAddr,
        parts: &[IoSlice<'_>],
        descs: &[Desc],
        context: u64,
    ) -> Result<bool> {
        if parts.is_empty() || parts.len() > MAX_SEND_PARTS.min(self.info.provider.iov_limit.max(1))
        {
            return Err(FabricError::Invalid(format!(
                "a send takes 1 to {} buffers here, not {}",
                MAX_SEND_PARTS.min(self.info.provider.iov_limit.max(1)),
                parts.len()
            )));
        }
        if !descs.is_empty() && descs.len() != parts.len() {
            return Err(FabricError::Invalid(format!(
                "{} descriptors for {} buffers",
                descs.len(),
                parts.len()
            )));
        }
        let len = parts.iter().map(|p| p.len()).sum();
        self.check_len(len)?;
        self.check_descs(descs, parts.len())?;
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_SEND_PARTS];
        let mut desc = [std::ptr::null_mut::<c_void>(); MAX_SEND_PARTS];
        for (i, part) in parts.iter().enumerate() {
            iov[i] = libc::iovec {
                iov_base: part.as_ptr() as *mut c_void,
                iov_len: part.len(),
            };
            desc[i] = descs.get(i).map_or(std::ptr::null_mut(), |d| d.0);
        }
        let (ep, count) = (self.shared.ep, parts.len());
        // SAFETY: as post_recv; iov and desc hold `count` entries for the call.
        self.start("fi_sendv", OpKind::Send, context, len, |ctx| unsafe {
            ffi::sendv(ep, iov.as_ptr(), desc.as_mut_ptr(), count, peer.0, ctx)
        })
    }

    /// Sends a small message that libfabric copies at once (`fi_inject`, at most
    /// [`crate::ProviderInfo::inject_size`] bytes): no completion, `data` is free on return.
    pub fn inject(&mut self, peer: PeerAddr, data: &[u8]) -> Result<bool> {
        let max = self.info.provider.inject_size;
        if data.len() > max {
            return Err(FabricError::Invalid(format!(
                "an inject of {} bytes exceeds the endpoint's inject size of {max}",
                data.len()
            )));
        }
        // SAFETY: the endpoint is live; inject copies `data` before it returns.
        let rc = unsafe { ffi::inject(self.shared.ep, data.as_ptr().cast(), data.len(), peer.0) };
        match rc {
            0 => Ok(true),
            rc if rc == -(ffi::FI_EAGAIN as isize) => Ok(false),
            rc => Err(self.shared.lib.call_error("fi_inject", rc)),
        }
    }

    /// Reads `len` bytes of a peer's registered memory at `remote` into `buf` (`fi_read`).
    ///
    /// # Safety
    /// As [`Endpoint::post_recv`] for `buf`.
    pub unsafe fn read(
        &mut self,
        peer: PeerAddr,
        buf: *mut u8,
        len: usize,
        desc: Desc,
        remote: Remote,
        context: u64,
    ) -> Result<bool> {
        self.check_len(len)?;
        self.check_descs(&[desc], 1)?;
        let ep = self.shared.ep;
        // SAFETY: as post_recv.
        self.start("fi_read", OpKind::Read, context, len, |ctx| unsafe {
            ffi::rma(
                ffi::RmaOp::Read,
                ep,
                buf.cast(),
                len,
                desc.0,
                peer.0,
                remote.addr,
                remote.key,
                ctx,
            )
        })
    }

    /// Writes `len` bytes from `buf` into a peer's registered memory at `remote`
    /// (`fi_write`).
    ///
    /// # Safety
    /// As [`Endpoint::send`] for `buf`.
    pub unsafe fn write(
        &mut self,
        peer: PeerAddr,
        buf: *const u8,
        len: usize,
        desc: Desc,
        remote: Remote,
        context: u64,
    ) -> Result<bool> {
        self.check_len(len)?;
        self.check_descs(&[desc], 1)?;
        let ep = self.shared.ep;
        // SAFETY: as send.
        self.start("fi_write", OpKind::Write, context, len, |ctx| unsafe {
            ffi::rma(
                ffi::RmaOp::Write,
                ep,
                buf as *mut c_void,
                len,
                desc.0,
                peer.0,
                remote.addr,
                remote.key,
                ctx,
            )
        })
    }

    /// Operations started and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.shared.contexts.borrow().in_flight()
    }

    /// Makes progress and appends finished operations to `out` (`fi_cq_read` in batches;
    /// an error entry becomes a completion with its error). Returns how many it appended.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        for _ in 0..POLL_ROUNDS {
            // SAFETY: the CQ is live and opened with FI_CQ_FORMAT_DATA.
            let rc = unsafe { ffi::cq_read(self.shared.cq, &mut self.entries) };
            if rc > 0 {
                let read = (rc as usize).min(self.entries.len());
                let mut contexts = self.shared.contexts.borrow_mut();
                for entry in &self.entries[..read] {
                    if let Some((user, len, kind)) = contexts.finish(entry.op_context) {
                        let len = if kind == OpKind::Recv { entry.len } else { len };
                        out.push(Completion {
                            context: user,
                            kind,
                            result: Ok(len),
                        });
                    }
                }
                if read < self.entries.len() {
                    break;
                }
            } else if rc == -(ffi::FI_EAVAIL as isize) {
                self.read_error(out)?;
            } else if rc == -(ffi::FI_EAGAIN as isize) {
                break;
            } else {
                return Err(self.shared.lib.call_error("fi_cq_read", rc));
            }
        }
        Ok(out.len() - before)
    }

    fn read_error(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        let mut entry = ffi::CqErrEntry::zeroed();
        // SAFETY: the CQ is live; `entry` has room for the error entry of our API version.
        let rc = unsafe { ffi::cq_readerr(self.shared.cq, &mut entry) };
        if rc == -(ffi::FI_EAGAIN as isize) {
            return Ok(());
        }
        if rc < 0 {
            return Err(self.shared.lib.call_error("fi_cq_readerr", rc));
        }
        let mut buf = [0u8; 256];
        // SAFETY: the entry was just read; its err_data is the provider's until the next read.
        let provider_text =
            unsafe { info::text(ffi::cq_strerror(self.shared.cq, &entry, &mut buf)) };
        let error = CompletionError {
            code: entry.err.abs(),
            text: self.shared.lib.strerror(entry.err),
            provider_errno: entry.prov_errno,
            provider_text,
            overflow: entry.olen,
        };
        if let Some((user, _, kind)) = self.shared.contexts.borrow_mut().finish(entry.op_context) {
            out.push(Completion {
                context: user,
                kind,
                result: Err(error),
            });
        }
        Ok(())
    }
}
