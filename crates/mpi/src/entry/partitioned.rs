//! Chapter 4 of MPI 5.0, partitioned point-to-point communication: `MPI_Psend_init`,
//! `MPI_Precv_init`, `MPI_Pready` (and its range and list forms) and `MPI_Parrived`, over
//! [`crate::part`].

use super::NONE;
use crate::abi::*;
use crate::error::{fail, MpiError};
use crate::p2p::count_arg;
use crate::part::partitioned;
use crate::part::*;
use crate::request::Progress;
use crate::state::running;
use std::ffi::{c_int, c_void};

mpi! {
    /// Partitioned send: `partitions` × `count` elements to `dest`, started with MPI_Start;
    /// each MPI_Pready* call sends the blocks of the round it completes.
    fn MPI_Psend_init / PMPI_Psend_init(buf: *const c_void, partitions: c_int, count: i64, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, info: Handle, request: *mut Handle) on comm => {
        let _ = info;
        init(true, buf as *mut c_void, partitions, count, datatype, dest, tag, comm, request)
    }
}

mpi! {
    /// Partitioned receive of `partitions` × `count` elements from `source`.
    fn MPI_Precv_init / PMPI_Precv_init(buf: *mut c_void, partitions: c_int, count: i64, datatype: Handle, source: c_int, tag: c_int, comm: Handle, info: Handle, request: *mut Handle) on comm => {
        let _ = info;
        init(false, buf, partitions, count, datatype, source, tag, comm, request)
    }
}

mpi! {
    /// Marks one partition of a started partitioned send ready.
    fn MPI_Pready / PMPI_Pready(partition: c_int, request: Handle) on NONE => {
        ready(request, std::iter::once(partition), "MPI_Pready")
    }
}

mpi! {
    /// Marks partitions `partition_low..=partition_high` ready.
    fn MPI_Pready_range / PMPI_Pready_range(partition_low: c_int, partition_high: c_int, request: Handle) on NONE => {
        if partition_low > partition_high {
            return fail(MPI_ERR_ARG, format!("MPI_Pready_range: low {partition_low} is above high {partition_high}"));
        }
        ready(request, partition_low..=partition_high, "MPI_Pready_range")
    }
}

mpi! {
    /// Marks the `length` partitions listed in `array_of_partitions` ready.
    fn MPI_Pready_list / PMPI_Pready_list(length: c_int, array_of_partitions: *const c_int, request: Handle) on NONE => {
        let n = count_arg(length)?;
        if n > 0 && array_of_partitions.is_null() {
            return fail(MPI_ERR_ARG, "MPI_Pready_list: array_of_partitions is NULL");
        }
        let list: &[c_int] = if n == 0 { &[] } else { std::slice::from_raw_parts(array_of_partitions, n) };
        ready(request, list.iter().copied(), "MPI_Pready_list")
    }
}

mpi! {
    /// Whether every byte of `partition` of a started partitioned receive has arrived.
    fn MPI_Parrived / PMPI_Parrived(request: Handle, partition: c_int, flag: *mut c_int) on NONE => {
        let Some(flag) = flag.as_mut() else { return fail(MPI_ERR_ARG, "flag is NULL") };
        let (p, done) = running(|s| {
            let p = partitioned(s, request, false, "MPI_Parrived")?;
            if usize::try_from(partition).map_or(true, |i| i >= p.partitions) {
                return fail(MPI_ERR_ARG, format!("MPI_Parrived: partition {partition} is not in 0..{}", p.partitions));
            }
            let req = s.requests.get(request).ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, "request vanished"))?;
            // Completed by MPI_Request_get_status: the data is there.
            Ok((p, matches!(req.progress, Progress::Done(_))))
        })?;
        // Outside the state: progress may run handlers that enter it.
        *flag = (done || p.arrived(partition as usize)?) as c_int;
        Ok(())
    }
}
