//! Collective calls that carry no data on any rank complete without communicating.
//!
//! The standard requires the ranks' type signatures of a call to match, so for most
//! collectives a rank's own arguments tell it how many bytes every rank moves: when that is
//! none, every rank knows it alike and every rank can return at once. Such a call takes no
//! call number (the numbers tag the messages of later calls, and every rank skips the same
//! ones), records no way in the shared segment's records (`ways.rs`: every rank records the
//! same calls), plans no schedule, and its nonblocking form is a request complete already. Its
//! arguments are still checked first, as those of any other call (a root out of range fails).
//!
//! The calls it covers: a broadcast, reduction, allreduce, gather, scatter, allgather,
//! alltoall or scan (inclusive or exclusive) of 0 bytes, and a reduce-scatter or an allgatherv
//! whose counts (which every rank passes for every rank) are all 0. Not covered, so they
//! still communicate: a barrier (it synchronises whatever it carries); a gatherv or scatterv,
//! where a rank other than the root knows only its own count and another rank may still
//! send; an alltoallv, where a rank knows only what it sends and what it receives, not what
//! two other ranks exchange.

use crate::coll::api::Collective;
use crate::comm::Comm;
use crate::error::Error;

impl Collective<'_> {
    /// Whether this call carries no data on any rank, as every rank can tell from its own
    /// arguments (see the module's description).
    #[inline]
    pub(crate) fn carries_nothing(&self) -> bool {
        match *self {
            Collective::Bcast { bytes, .. }
            | Collective::Reduce { bytes, .. }
            | Collective::Allreduce { bytes, .. }
            | Collective::Scan { bytes, .. } => bytes == 0,
            Collective::Gather { block, .. }
            | Collective::Scatter { block, .. }
            | Collective::Allgather { block }
            | Collective::Alltoall { block } => block == 0,
            Collective::ReduceScatter { counts } | Collective::Allgatherv { counts, .. } => {
                counts.iter().all(|&c| c == 0)
            }
            // A barrier synchronises. A gatherv's or a scatterv's rank other than the root,
            // and any rank of an alltoallv, cannot tell that the other ranks send nothing.
            Collective::Barrier
            | Collective::Gatherv { .. }
            | Collective::Scatterv { .. }
            | Collective::Alltoallv { .. } => false,
        }
    }
}

impl Comm {
    /// Checks the arguments of `call` that do not depend on its data: a root that is a rank
    /// of this communicator, and one count and displacement per rank. Every call is checked
    /// so, whether it communicates or not.
    pub(crate) fn check_call(&self, call: &Collective<'_>) -> Result<(), Error> {
        let n = self.size();
        let per_rank = |what: &str, v: &[usize]| {
            if v.len() == n {
                Ok(())
            } else {
                Err(Error::Config(format!(
                    "{what} has {} entries for a communicator of {n}",
                    v.len()
                )))
            }
        };
        match *call {
            Collective::Barrier
            | Collective::Allreduce { .. }
            | Collective::Allgather { .. }
            | Collective::Alltoall { .. }
            | Collective::Scan { .. } => Ok(()),
            Collective::Bcast { root, .. }
            | Collective::Reduce { root, .. }
            | Collective::Gather { root, .. }
            | Collective::Scatter { root, .. } => self.check_root(root),
            Collective::Gatherv {
                counts,
                displs,
                root,
            }
            | Collective::Scatterv {
                counts,
                displs,
                root,
            } => {
                self.check_root(root)?;
                per_rank("counts", counts)?;
                per_rank("displs", displs)
            }
            Collective::Allgatherv { counts, displs } => {
                per_rank("counts", counts)?;
                per_rank("displs", displs)
            }
            Collective::Alltoallv {
                send_counts,
                send_displs,
                recv_counts,
                recv_displs,
            } => {
                per_rank("send counts", send_counts)?;
                per_rank("send displs", send_displs)?;
                per_rank("receive counts", recv_counts)?;
                per_rank("receive displs", recv_displs)
            }
            Collective::ReduceScatter { counts } => per_rank("counts", counts),
        }
    }

    /// Checks the root of a collective.
    pub(crate) fn check_root(&self, root: usize) -> Result<(), Error> {
        if root >= self.size() {
            return Err(Error::RankOutOfRange {
                rank: root,
                size: self.size(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_of_zero_bytes_carry_nothing_and_calls_with_bytes_do() {
        for bytes in [0usize, 8] {
            let calls = [
                Collective::Bcast { bytes, root: 1 },
                Collective::Reduce {
                    bytes,
                    elem: 4,
                    root: 0,
                    commutative: false,
                },
                Collective::Allreduce {
                    bytes,
                    elem: 8,
                    commutative: true,
                    in_place: true,
                },
                Collective::Gather {
                    block: bytes,
                    root: 0,
                },
                Collective::Scatter {
                    block: bytes,
                    root: 2,
                },
                Collective::Allgather { block: bytes },
                Collective::Alltoall { block: bytes },
                Collective::Scan {
                    bytes,
                    exclusive: true,
                },
            ];
            for call in calls {
                assert_eq!(call.carries_nothing(), bytes == 0, "{call:?}");
            }
        }
    }

    #[test]
    fn only_forms_whose_counts_every_rank_knows_skip_zero_counts() {
        const ZEROS: &[usize] = &[0; 3];
        const ONE: &[usize] = &[0, 4, 0];
        let known = |counts: &'static [usize]| {
            [
                Collective::ReduceScatter { counts },
                Collective::Allgatherv {
                    counts,
                    displs: &[0, 0, 0],
                },
            ]
        };
        assert!(known(ZEROS).iter().all(Collective::carries_nothing));
        assert!(!known(ONE).iter().any(Collective::carries_nothing));
        let unknown = [
            Collective::Barrier,
            Collective::Gatherv {
                counts: ZEROS,
                displs: ZEROS,
                root: 0,
            },
            Collective::Scatterv {
                counts: ZEROS,
                displs: ZEROS,
                root: 0,
            },
            Collective::Alltoallv {
                send_counts: ZEROS,
                send_displs: ZEROS,
                recv_counts: ZEROS,
                recv_displs: ZEROS,
            },
        ];
        assert!(!unknown.iter().any(Collective::carries_nothing));
    }
}
