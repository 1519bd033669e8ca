//! The one way work above the point-to-point engine moves with it: a [`Hook`] that every
//! progress pass and every wait that backs off calls. The collectives plug in here
//! (`crate::coll::Collectives`); the engine knows nothing else of them.
//!
//! A hook is passed to each call that drives progress rather than kept in the engine, so that
//! its state stays with its owner, borrowed apart from the engine, and a pass with no hook
//! ([`NoHook`]) costs nothing.

use super::*;

/// Work that runs on the engine's point-to-point surface and must move whenever the engine
/// does (a running collective waits for its requests and then starts its next steps).
pub(crate) trait Hook {
    /// Whether [`Hook::advance`] could move anything now, `completions` being how many
    /// requests the engine has completed so far. Asked on every look of a wait: keep it a
    /// few loads.
    fn wants_pass(&self, completions: u64) -> bool;

    /// Starts and finishes what it can on `engine`; whether anything moved.
    fn advance(&mut self, engine: &mut Engine) -> Result<bool, Error>;

    /// Whether it has anything for [`Hook::look`] to look at.
    fn watching(&self) -> bool {
        false
    }

    /// A wait has found nothing for a while (the engine calls this now and then while it
    /// backs off, with the time): fail on what can never complete.
    fn look(&mut self, _now: Instant) -> Result<(), Error> {
        Ok(())
    }
}

/// No work above the engine: what a pass of the engine alone takes.
pub(crate) struct NoHook;

impl Hook for NoHook {
    #[inline(always)]
    fn wants_pass(&self, _completions: u64) -> bool {
        false
    }

    fn advance(&mut self, _engine: &mut Engine) -> Result<bool, Error> {
        Ok(false)
    }
}
