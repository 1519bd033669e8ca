//! User-Level Failure Mitigation: the MPIX_ calls MPICH and Open MPI (`mpi-ext.h`) export for
//! fault-tolerant jobs (`ferry run --fault-tolerant`). The semantics are in [`crate::ft`].

use crate::abi::*;
use crate::check::out;
use crate::error::fail;
use crate::ft;
use std::ffi::c_int;

mpi! {
    /// Revokes a communicator at every member.
    fn MPIX_Comm_revoke / PMPIX_Comm_revoke(comm: Handle) on comm => {
        ft::revoke(comm)
    }
}

mpi! {
    /// Whether a communicator was revoked.
    fn MPIX_Comm_is_revoked / PMPIX_Comm_is_revoked(comm: Handle, flag: *mut c_int) on comm => {
        let flag = out(flag, "flag")?;
        *flag = ft::is_revoked(comm)? as c_int;
        Ok(())
    }
}

mpi! {
    /// The group of the communicator's members known to have failed.
    fn MPIX_Comm_get_failed / PMPIX_Comm_get_failed(comm: Handle, failed: *mut Handle) on comm => {
        let failed = out(failed, "failedgrp")?;
        *failed = ft::get_failed(comm)?;
        Ok(())
    }
}

mpi! {
    /// Acknowledges the first `num_to_ack` failed members; `num_acked` says how many are.
    fn MPIX_Comm_ack_failed / PMPIX_Comm_ack_failed(comm: Handle, num_to_ack: c_int, num_acked: *mut c_int) on comm => {
        let acked = out(num_acked, "num_acked")?;
        let Ok(wanted) = usize::try_from(num_to_ack) else {
            return fail(MPI_ERR_ARG, format!("num_to_ack {num_to_ack} is negative"));
        };
        *acked = ft::ack_failed(comm, wanted)? as c_int;
        Ok(())
    }
}

mpi! {
    /// Acknowledges every failed member known now (the older form of MPIX_Comm_ack_failed).
    fn MPIX_Comm_failure_ack / PMPIX_Comm_failure_ack(comm: Handle) on comm => {
        ft::ack_failed(comm, usize::MAX).map(drop)
    }
}

mpi! {
    /// The group of the acknowledged failed members.
    fn MPIX_Comm_failure_get_acked / PMPIX_Comm_failure_get_acked(comm: Handle, failed: *mut Handle) on comm => {
        let failed = out(failed, "failedgrp")?;
        *failed = ft::get_acked(comm)?;
        Ok(())
    }
}

mpi! {
    /// Agrees on the AND of the flags of the live members, even if members fail meanwhile.
    fn MPIX_Comm_agree / PMPIX_Comm_agree(comm: Handle, flag: *mut c_int) on comm => {
        let flag = out(flag, "flag")?;
        ft::agree(comm, flag)
    }
}

mpi! {
    /// MPIX_Comm_agree as a request; `flag` is written when it completes.
    fn MPIX_Comm_iagree / PMPIX_Comm_iagree(comm: Handle, flag: *mut c_int, request: *mut Handle) on comm => {
        out(flag, "flag")?;
        let request = out(request, "request")?;
        ft::iagree(comm, flag, request)
    }
}

mpi! {
    /// A new communicator of the members that have not failed.
    fn MPIX_Comm_shrink / PMPIX_Comm_shrink(comm: Handle, newcomm: *mut Handle) on comm => {
        let newcomm = out(newcomm, "newcomm")?;
        *newcomm = ft::shrink(comm)?;
        Ok(())
    }
}

mpi! {
    /// MPIX_Comm_shrink with a request (complete when the call returns).
    fn MPIX_Comm_ishrink / PMPIX_Comm_ishrink(comm: Handle, newcomm: *mut Handle, request: *mut Handle) on comm => {
        let newcomm = out(newcomm, "newcomm")?;
        let request = out(request, "request")?;
        *newcomm = ft::ishrink(comm, request)?;
        Ok(())
    }
}
