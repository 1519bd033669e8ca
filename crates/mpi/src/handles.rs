//! Tables that turn created MPI objects into handles and back.
//!
//! A created object's handle is `kind << 56 | generation << 32 | slot`: far above the
//! predefined constants (< 0x1000), tagged with its kind so a communicator passed where a
//! datatype belongs is caught, and with a generation so a freed handle is not mistaken for
//! the object that reuses its slot.

use crate::abi::Handle;

/// Which table a handle belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// MPI_Comm.
    Comm = 1,
    /// MPI_Group.
    Group = 2,
    /// MPI_Datatype.
    Datatype = 3,
    /// MPI_Op.
    Op = 4,
    /// MPI_Request.
    Request = 5,
    /// MPI_Errhandler.
    Errhandler = 6,
    /// MPI_Info.
    Info = 7,
    /// MPI_Message.
    Message = 8,
    /// MPI_Session.
    Session = 9,
    /// MPI_File.
    File = 10,
    /// MPI_Win.
    Win = 11,
    /// MPI_T_cvar_handle.
    ToolCvar = 12,
    /// MPI_T_pvar_session.
    ToolSession = 13,
    /// MPI_T_pvar_handle.
    ToolPvar = 14,
    /// MPI_T_enum (not in a table: the enumerations are fixed, see `tool.rs`).
    ToolEnum = 15,
    /// An MPI_Request of a send that finished when it started (not in a table: the handle
    /// holds the byte count, see `request::sent_handle`).
    SentRequest = 16,
    /// An MPI_Request that names the runtime's request itself (not in a table: a dense receive
    /// on a communicator whose ranks are the world's, see `request::engine_handle`).
    EngineRequest = 17,
    /// MPI_T_event_registration.
    ToolEventRegistration = 18,
    /// MPI_T_event_instance (not in a table: valid only inside its callback, see
    /// `tool::events`).
    ToolEventInstance = 19,
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Objects of one kind, addressed by handle.
pub(crate) struct Table<T> {
    kind: Kind,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    /// Whether no object is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.value.is_none())
    }

    /// An empty table for objects of `kind`.
    pub(crate) fn new(kind: Kind) -> Table<T> {
        Table {
            kind,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn handle(&self, generation: u32, slot: u32) -> Handle {
        ((self.kind as usize) << 56) | (((generation & 0xff_ffff) as usize) << 32) | slot as usize
    }

    fn locate(&self, handle: Handle) -> Option<usize> {
        if handle >> 56 != self.kind as usize {
            return None;
        }
        let slot = handle & 0xffff_ffff;
        let generation = ((handle >> 32) & 0xff_ffff) as u32;
        let s = self.slots.get(slot)?;
        (s.generation & 0xff_ffff == generation && s.value.is_some()).then_some(slot)
    }

    /// Stores `value` and returns its new handle.
    pub(crate) fn insert(&mut self, value: T) -> Handle {
        match self.free.pop() {
            Some(slot) => {
                let s = &mut self.slots[slot as usize];
                s.generation = s.generation.wrapping_add(1);
                s.value = Some(value);
                let generation = s.generation;
                self.handle(generation, slot)
            }
            None => {
                let slot = self.slots.len() as u32;
                self.slots.push(Slot {
                    generation: 0,
                    value: Some(value),
                });
                self.handle(0, slot)
            }
        }
    }

    /// The object behind `handle`, if it is a live handle of this table.
    pub(crate) fn get(&self, handle: Handle) -> Option<&T> {
        let slot = self.locate(handle)?;
        self.slots[slot].value.as_ref()
    }

    /// The object behind `handle`, mutably.
    pub(crate) fn get_mut(&mut self, handle: Handle) -> Option<&mut T> {
        let slot = self.locate(handle)?;
        self.slots[slot].value.as_mut()
    }

    /// Removes and returns the object behind `handle`.
    pub(crate) fn remove(&mut self, handle: Handle) -> Option<T> {
        let slot = self.locate(handle)?;
        self.free.push(slot as u32);
        self.slots[slot].value.take()
    }

    /// Drops the object behind `handle` where it lies (no move out, as [`Table::remove`]
    /// makes); whether there was one.
    pub(crate) fn discard(&mut self, handle: Handle) -> bool {
        let Some(slot) = self.locate(handle) else {
            return false;
        };
        self.free.push(slot as u32);
        self.slots[slot].value = None;
        true
    }

    /// The handles of every live object, in slot order.
    pub(crate) fn handles(&self) -> Vec<Handle> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.value.is_some())
            .map(|(i, s)| self.handle(s.generation, i as u32))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_foreign_handles_are_rejected() {
        let mut comms: Table<u32> = Table::new(Kind::Comm);
        let types: Table<u32> = Table::new(Kind::Datatype);
        let a = comms.insert(1);
        assert_eq!(comms.get(a), Some(&1));
        assert!(types.get(a).is_none());
        assert_eq!(comms.remove(a), Some(1));
        let b = comms.insert(2);
        assert_ne!(a, b, "a reused slot gets a new handle");
        assert!(comms.get(a).is_none());
        assert_eq!(comms.get(b), Some(&2));
        assert!(a > 0x1000 && b > 0x1000);
    }

    #[test]
    fn a_discarded_handle_is_gone_and_its_slot_reused_under_a_new_handle() {
        let mut requests: Table<String> = Table::new(Kind::Request);
        let a = requests.insert("a".into());
        assert!(requests.discard(a));
        assert!(requests.get(a).is_none());
        assert!(!requests.discard(a), "a second discard finds nothing");
        let b = requests.insert("b".into());
        assert_ne!(a, b);
        assert_eq!(requests.get(b).map(String::as_str), Some("b"));
        assert!(!requests.is_empty());
    }
}
