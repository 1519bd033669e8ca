//! Chapter 7 of MPI 5.0, groups, contexts, communicators and caching: communicator and group
//! management, intercommunicator creation and merge, and attributes on communicators and
//! datatypes. The semantics are in [`crate::comm`], [`crate::inter`] and [`crate::types`].

use super::NONE;
use crate::abi::*;
use crate::check::out;
use crate::comm::{dup, idup};
use crate::comm::{register, *};
use crate::env::write_string;
use crate::error::{fail, MpiError, Res};
use crate::inter::*;
use crate::p2p::count_arg;
use crate::state::{running, with, AttrKind};
use crate::types::*;
use std::ffi::{c_char, c_int, c_void, CStr};

mpi! {
    /// An attribute key for datatypes.
    fn MPI_Type_create_keyval / PMPI_Type_create_keyval(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        crate::comm::create_keyval(copy, delete, keyval, extra, crate::state::AttrKind::Type)
    }
}

mpi! {
    /// Frees a datatype attribute key.
    fn MPI_Type_free_keyval / PMPI_Type_free_keyval(keyval: *mut c_int) on NONE => {
        crate::comm::free_keyval(keyval)
    }
}

mpi! {
    /// Sets a datatype attribute.
    fn MPI_Type_set_attr / PMPI_Type_set_attr(datatype: Handle, keyval: c_int, value: *mut c_void) on NONE => {
        let old = running(|s| {
            s.datatype(datatype)?;
            keyval_of(s, keyval)?;
            Ok(s.type_attrs.get(&datatype).and_then(|m| m.get(&keyval)).copied())
        })?;
        // The old value's delete callback runs first; if it fails, the old value stays.
        if let Some(v) = old {
            type_delete(datatype, keyval, v)?;
        }
        running(|s| {
            s.type_attrs.entry(datatype).or_default().insert(keyval, value);
            Ok(())
        })
    }
}

mpi! {
    /// Reads a datatype attribute.
    fn MPI_Type_get_attr / PMPI_Type_get_attr(datatype: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on NONE => {
        let flag = out(flag, "flag")?;
        let found = running(|s| {
            s.datatype(datatype)?;
            keyval_of(s, keyval)?;
            Ok(s.type_attrs.get(&datatype).and_then(|m| m.get(&keyval)).copied())
        })?;
        match found {
            Some(v) => {
                *out(value as *mut *mut c_void, "attribute_val")? = v;
                *flag = 1;
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

mpi! {
    /// Deletes a datatype attribute.
    fn MPI_Type_delete_attr / PMPI_Type_delete_attr(datatype: Handle, keyval: c_int) on NONE => {
        let old = running(|s| {
            s.datatype(datatype)?;
            keyval_of(s, keyval)?;
            Ok(s.type_attrs.get(&datatype).and_then(|m| m.get(&keyval)).copied())
        })?;
        let Some(v) = old else {
            return fail(MPI_ERR_KEYVAL, format!("no attribute for keyval {keyval}"));
        };
        // Removed only once its delete callback succeeds.
        type_delete(datatype, keyval, v)?;
        running(|s| {
            if let Some(m) = s.type_attrs.get_mut(&datatype) {
                m.remove(&keyval);
            }
            Ok(())
        })
    }
}

mpi! {
    /// Number of ranks.
    fn MPI_Comm_size / PMPI_Comm_size(comm: Handle, size: *mut c_int) on comm => {
        let n = running(|s| s.local_size(comm))?;
        *out(size, "size")? = n as c_int;
        Ok(())
    }
}

mpi! {
    /// This process's rank.
    fn MPI_Comm_rank / PMPI_Comm_rank(comm: Handle, rank: *mut c_int) on comm => {
        let r = running(|s| Ok(s.comm(comm)?.comm.rank()))?;
        *out(rank, "rank")? = r as c_int;
        Ok(())
    }
}

mpi! {
    /// Duplicates a communicator (new context, copied attributes).
    fn MPI_Comm_dup / PMPI_Comm_dup(comm: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        *out = dup(comm)?;
        Ok(())
    }
}

mpi! {
    /// Duplicates a communicator; the info is ignored.
    fn MPI_Comm_dup_with_info / PMPI_Comm_dup_with_info(comm: Handle, _info: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        *out = dup(comm)?;
        Ok(())
    }
}

mpi! {
    /// Nonblocking duplicate, made at once without a message: the context ids are derived from
    /// the parent's and the number of its idups (see `idup` in this module).
    fn MPI_Comm_idup / PMPI_Comm_idup(comm: Handle, newcomm: *mut Handle, request: *mut Handle) on comm => {
        let req = out(request, "request")?;
        let new = out(newcomm, "newcomm")?;
        *new = idup(comm)?;
        *req = completed_request(comm)?;
        Ok(())
    }
}

mpi! {
    /// MPI_Comm_idup with hints (ignored).
    fn MPI_Comm_idup_with_info / PMPI_Comm_idup_with_info(comm: Handle, _info: Handle, newcomm: *mut Handle, request: *mut Handle) on comm => {
        let req = out(request, "request")?;
        let new = out(newcomm, "newcomm")?;
        *new = idup(comm)?;
        *req = completed_request(comm)?;
        Ok(())
    }
}

mpi! {
    /// Splits by color, ordered by key.
    fn MPI_Comm_split / PMPI_Comm_split(comm: Handle, color: c_int, key: c_int, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        let (core, inter) = running(|s| Ok((s.core_comm(comm)?, s.inter(comm)?)))?;
        if color < 0 && color != MPI_UNDEFINED {
            return fail(MPI_ERR_ARG, format!("split color {color} is negative (only MPI_UNDEFINED may be)"));
        }
        if let Some(inter) = inter {
            *out = crate::inter::split(comm, inter, color, key)?;
            return Ok(());
        }
        let color = match color {
            MPI_UNDEFINED => None,
            c => Some(c as u32),
        };
        *out = register(comm, core.split(color, key)?, false)?;
        Ok(())
    }
}

mpi! {
    /// Splits by shared-memory domain (one communicator per host). The host is the only
    /// hardware level ferry knows: MPI_COMM_TYPE_HW_GUIDED and _RESOURCE_GUIDED accept
    /// `mpi_hw_resource_type` = "mpi_shared_memory" (which every implementation must) and give
    /// MPI_COMM_NULL for other resources; MPI_COMM_TYPE_HW_UNGUIDED gives the host when it is
    /// a strict subset of `comm`, else MPI_COMM_NULL (MPI 4.1 §7.4.2). On an intercommunicator
    /// the result is the intercommunicator of each host's processes in both groups (as MPICH;
    /// MPI_COMM_TYPE_HW_UNGUIDED then acts as MPI_COMM_TYPE_SHARED).
    fn MPI_Comm_split_type / PMPI_Comm_split_type(comm: Handle, split_type: c_int, key: c_int, info: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        let (core, inter) = running(|s| Ok((s.core_comm(comm)?, s.inter(comm)?)))?;
        let by_host = match split_type {
            MPI_UNDEFINED => false,
            MPI_COMM_TYPE_SHARED | MPI_COMM_TYPE_HW_UNGUIDED => true,
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => running(|s| {
                if info == MPI_INFO_NULL {
                    return Ok(false);
                }
                Ok(info_mut(s, info)?
                    .iter()
                    .any(|(k, v)| k == "mpi_hw_resource_type" && v == "mpi_shared_memory"))
            })?,
            t => return fail(MPI_ERR_ARG, format!("split type {t} is not a communicator split type")),
        };
        if let Some(inter) = inter {
            // As MPICH: an intercommunicator of the processes of each host in both groups
            // (the color names the host alike on both sides).
            let color = if by_host { host_color(&host_key()) } else { MPI_UNDEFINED };
            *out = crate::inter::split(comm, inter, color, key)?;
            return Ok(());
        }
        // Processes passing MPI_UNDEFINED take part in the host exchange too: it is collective.
        let mine = host_key();
        let mut all = vec![0u8; 64 * core.size()];
        core.allgather(&mine, &mut all)?;
        let hosts: Vec<&[u8]> = all.chunks(64).collect();
        let whole = hosts.iter().all(|h| *h == &mine[..]);
        let color = match split_type {
            _ if !by_host => None,
            MPI_COMM_TYPE_HW_UNGUIDED if whole => None,
            _ => hosts.iter().position(|h| *h == &mine[..]).map(|i| i as u32),
        };
        *out = register(comm, core.split(color, key)?, false)?;
        Ok(())
    }
}

mpi! {
    /// A communicator of the members of `group` (collective over `comm`).
    fn MPI_Comm_create / PMPI_Comm_create(comm: Handle, group: Handle, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        let (core, members, inter) = running(|s| Ok((s.core_comm(comm)?, s.group(group)?, s.inter(comm)?)))?;
        if let Some(inter) = inter {
            *out = crate::inter::create(comm, inter, &members)?;
            return Ok(());
        }
        let parent: Vec<u32> = core.world_ranks().to_vec();
        if let Some(w) = members.iter().find(|w| !parent.contains(w)) {
            return fail(MPI_ERR_GROUP, format!("group member (world rank {w}) is not in the communicator"));
        }
        let me = parent[core.rank()];
        let position = members.iter().position(|&w| w == me);
        // Processes may pass different, disjoint groups (MPI 2.2+): each group is its own
        // color, named by its lowest member.
        let color = position.map(|_| members.iter().copied().min().unwrap_or(0));
        let key = position.unwrap_or(0) as c_int;
        *out = register(comm, core.split(color, key)?, false)?;
        Ok(())
    }
}

mpi! {
    /// A communicator of the members of `group`, collective over those members only.
    fn MPI_Comm_create_group / PMPI_Comm_create_group(comm: Handle, group: Handle, tag: c_int, newcomm: *mut Handle) on comm => {
        let out = out(newcomm, "newcomm")?;
        if tag < 0 {
            return fail(MPI_ERR_TAG, format!("invalid tag {tag}"));
        }
        let (core, members) = running(|s| Ok((s.intra_comm(comm)?, s.group(group)?)))?;
        let parent = core.world_ranks();
        let ranks = members
            .iter()
            .map(|w| parent.iter().position(|p| p == w).ok_or_else(|| {
                MpiError::new(MPI_ERR_GROUP, format!("group member (world rank {w}) is not in the communicator"))
            }))
            .collect::<Res<Vec<usize>>>()?;
        *out = register(comm, core.create_subset(&ranks, tag)?, false)?;
        Ok(())
    }
}

mpi! {
    /// Compares two communicators.
    fn MPI_Comm_compare / PMPI_Comm_compare(comm1: Handle, comm2: Handle, result: *mut c_int) on comm1 => {
        let out = out(result, "result")?;
        let (a, b, ia, ib, la, lb) = running(|s| {
            Ok((s.core_comm(comm1)?, s.core_comm(comm2)?, s.inter(comm1)?, s.inter(comm2)?,
                s.local_group(comm1)?, s.local_group(comm2)?))
        })?;
        *out = if comm1 == comm2 || a.context_id() == b.context_id() {
            MPI_IDENT
        } else if ia.is_some() != ib.is_some() {
            MPI_UNEQUAL
        } else if ia.is_some() {
            // Intercommunicators: both the local and the remote groups count (MPI 4.1 §7.4.1).
            match (compare_members(&la, &lb), compare_members(a.world_ranks(), b.world_ranks())) {
                (MPI_IDENT, MPI_IDENT) => MPI_CONGRUENT,
                (MPI_UNEQUAL, _) | (_, MPI_UNEQUAL) => MPI_UNEQUAL,
                _ => MPI_SIMILAR,
            }
        } else {
            match compare_members(a.world_ranks(), b.world_ranks()) {
                MPI_IDENT => MPI_CONGRUENT,
                r => r,
            }
        };
        Ok(())
    }
}

mpi! {
    /// Frees a communicator (deleting its attributes first).
    fn MPI_Comm_free / PMPI_Comm_free(comm: *mut Handle) on NONE => {
        free_comm(out(comm, "comm")?)
    }
}

mpi! {
    /// The group of a communicator.
    fn MPI_Comm_group / PMPI_Comm_group(comm: Handle, group: *mut Handle) on comm => {
        let out = out(group, "group")?;
        *out = running(|s| {
            let members = s.local_group(comm)?;
            Ok(new_group(s, members))
        })?;
        Ok(())
    }
}

mpi! {
    /// Whether a communicator is an intercommunicator.
    fn MPI_Comm_test_inter / PMPI_Comm_test_inter(comm: Handle, flag: *mut c_int) on comm => {
        let inter = running(|s| s.inter(comm))?;
        *out(flag, "flag")? = inter.is_some() as c_int;
        Ok(())
    }
}

mpi! {
    /// Size of an intercommunicator's remote group.
    fn MPI_Comm_remote_size / PMPI_Comm_remote_size(comm: Handle, size: *mut c_int) on comm => {
        let n = running(|s| remote_members(s, comm))?.len();
        *out(size, "size")? = n as c_int;
        Ok(())
    }
}

mpi! {
    /// An intercommunicator's remote group.
    fn MPI_Comm_remote_group / PMPI_Comm_remote_group(comm: Handle, group: *mut Handle) on comm => {
        let out = out(group, "group")?;
        *out = running(|s| {
            let members = remote_members(s, comm)?;
            Ok(new_group(s, members))
        })?;
        Ok(())
    }
}

mpi! {
    /// Names a communicator.
    fn MPI_Comm_set_name / PMPI_Comm_set_name(comm: Handle, name: *const c_char) on comm => {
        if name.is_null() {
            return fail(MPI_ERR_ARG, "name is NULL");
        }
        let text = CStr::from_ptr(name).to_string_lossy().chars().take(MPI_MAX_OBJECT_NAME - 1).collect();
        running(|s| { s.comm_mut(comm)?.name = text; Ok(()) })
    }
}

mpi! {
    /// A communicator's name; "MPI_COMM_NULL" for the null handle, which MPI 4.1 allows here.
    fn MPI_Comm_get_name / PMPI_Comm_get_name(comm: Handle, name: *mut c_char, resultlen: *mut c_int) on comm => {
        if comm == MPI_COMM_NULL {
            return write_string("MPI_COMM_NULL", name, MPI_MAX_OBJECT_NAME, resultlen);
        }
        let text = running(|s| Ok(s.comm(comm)?.name.clone()))?;
        write_string(&text, name, MPI_MAX_OBJECT_NAME, resultlen)
    }
}

mpi! {
    /// The hints in use (none).
    fn MPI_Comm_get_info / PMPI_Comm_get_info(comm: Handle, info: *mut Handle) on comm => {
        let out = out(info, "info")?;
        *out = running(|s| { s.comm(comm)?; Ok(s.infos.insert(Vec::new())) })?;
        Ok(())
    }
}

mpi! {
    /// Creates an attribute key.
    fn MPI_Comm_create_keyval / PMPI_Comm_create_keyval(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        create_keyval(copy, delete, keyval, extra, AttrKind::Comm)
    }
}

mpi! {
    /// Creates an attribute key (MPI-1 name).
    fn MPI_Keyval_create / PMPI_Keyval_create(copy: usize, delete: usize, keyval: *mut c_int, extra: *mut c_void) on NONE => {
        create_keyval(copy, delete, keyval, extra, AttrKind::Comm)
    }
}

mpi! {
    /// Frees an attribute key.
    fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) on NONE => { free_keyval(keyval) }
}

mpi! {
    /// Frees an attribute key (MPI-1 name).
    fn MPI_Keyval_free / PMPI_Keyval_free(keyval: *mut c_int) on NONE => { free_keyval(keyval) }
}

mpi! {
    /// Sets an attribute.
    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: Handle, keyval: c_int, value: *mut c_void) on comm => { set_attr(comm, keyval, value) }
}

mpi! {
    /// Sets an attribute (MPI-1 name).
    fn MPI_Attr_put / PMPI_Attr_put(comm: Handle, keyval: c_int, value: *mut c_void) on comm => { set_attr(comm, keyval, value) }
}

mpi! {
    /// Reads an attribute.
    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on comm => { get_attr(comm, keyval, value, flag) }
}

mpi! {
    /// Reads an attribute (MPI-1 name).
    fn MPI_Attr_get / PMPI_Attr_get(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) on comm => { get_attr(comm, keyval, value, flag) }
}

mpi! {
    /// Deletes an attribute.
    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: Handle, keyval: c_int) on comm => { delete_attr(comm, keyval) }
}

mpi! {
    /// Deletes an attribute (MPI-1 name).
    fn MPI_Attr_delete / PMPI_Attr_delete(comm: Handle, keyval: c_int) on comm => { delete_attr(comm, keyval) }
}

mpi! {
    /// Number of members.
    fn MPI_Group_size / PMPI_Group_size(group: Handle, size: *mut c_int) on NONE => {
        *out(size, "size")? = running(|s| s.group(group))?.len() as c_int;
        Ok(())
    }
}

mpi! {
    /// This process's rank in the group, or MPI_UNDEFINED.
    fn MPI_Group_rank / PMPI_Group_rank(group: Handle, rank: *mut c_int) on NONE => {
        let (g, me) = running(|s| Ok((s.group(group)?, s.world_rank().unwrap_or(0) as u32)))?;
        *out(rank, "rank")? = g.iter().position(|&w| w == me).map_or(MPI_UNDEFINED, |r| r as c_int);
        Ok(())
    }
}

mpi! {
    /// Ranks of one group's members in another.
    fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(group1: Handle, n: c_int, ranks1: *const c_int, group2: Handle, ranks2: *mut c_int) on NONE => {
        let n = count_arg(n)?;
        let (a, b) = running(|s| Ok((s.group(group1)?, s.group(group2)?)))?;
        if n == 0 {
            return Ok(());
        }
        if ranks1.is_null() || ranks2.is_null() {
            return fail(MPI_ERR_ARG, "rank array is NULL");
        }
        let (input, output) = (std::slice::from_raw_parts(ranks1, n), std::slice::from_raw_parts_mut(ranks2, n));
        for (i, &r) in input.iter().enumerate() {
            output[i] = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                let w = a[group_rank_arg(&a, r)?];
                b.iter().position(|&x| x == w).map_or(MPI_UNDEFINED, |p| p as c_int)
            };
        }
        Ok(())
    }
}

mpi! {
    /// Compares two groups.
    fn MPI_Group_compare / PMPI_Group_compare(group1: Handle, group2: Handle, result: *mut c_int) on NONE => {
        let (a, b) = running(|s| Ok((s.group(group1)?, s.group(group2)?)))?;
        *out(result, "result")? = compare_members(&a, &b);
        Ok(())
    }
}

mpi! {
    /// Members of either group (first's order, then the second's new ones).
    fn MPI_Group_union / PMPI_Group_union(group1: Handle, group2: Handle, newgroup: *mut Handle) on NONE => {
        group_op(group1, group2, newgroup, |a, b| {
            let mut v = a.to_vec();
            v.extend(b.iter().filter(|w| !a.contains(w)));
            v
        })
    }
}

mpi! {
    /// Members of both groups (first's order).
    fn MPI_Group_intersection / PMPI_Group_intersection(group1: Handle, group2: Handle, newgroup: *mut Handle) on NONE => {
        group_op(group1, group2, newgroup, |a, b| a.iter().copied().filter(|w| b.contains(w)).collect())
    }
}

mpi! {
    /// Members of the first group not in the second.
    fn MPI_Group_difference / PMPI_Group_difference(group1: Handle, group2: Handle, newgroup: *mut Handle) on NONE => {
        group_op(group1, group2, newgroup, |a, b| a.iter().copied().filter(|w| !b.contains(w)).collect())
    }
}

mpi! {
    /// The listed members, in the listed order.
    fn MPI_Group_incl / PMPI_Group_incl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| rank_list(g, n, ranks), true)
    }
}

mpi! {
    /// The members not listed.
    fn MPI_Group_excl / PMPI_Group_excl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| rank_list(g, n, ranks), false)
    }
}

mpi! {
    /// The members in the ranges.
    fn MPI_Group_range_incl / PMPI_Group_range_incl(group: Handle, n: c_int, ranges: *const [c_int; 3], newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| range_list(g, n, ranges), true)
    }
}

mpi! {
    /// The members outside the ranges.
    fn MPI_Group_range_excl / PMPI_Group_range_excl(group: Handle, n: c_int, ranges: *const [c_int; 3], newgroup: *mut Handle) on NONE => {
        subgroup(group, newgroup, |g| range_list(g, n, ranges), false)
    }
}

mpi! {
    /// Frees a group.
    fn MPI_Group_free / PMPI_Group_free(group: *mut Handle) on NONE => {
        let h = out(group, "group")?;
        running(|s| match *h {
            MPI_GROUP_EMPTY => Ok(()),
            g => {
                s.group_sessions.remove(&g);
                s.groups.remove(g).map(drop).ok_or_else(|| MpiError::new(MPI_ERR_GROUP, format!("invalid group {g:#x}")))
            }
        })?;
        *h = MPI_GROUP_NULL;
        Ok(())
    }
}

mpi! {
    /// Sets hints on a communicator: ferry uses none, so all are ignored (MPI 4.1 §7.4.4
    /// lets an implementation ignore hints; MPI_Comm_get_info then does not report them).
    fn MPI_Comm_set_info / PMPI_Comm_set_info(comm: Handle, info: Handle) on comm => {
        with(|s| {
            s.comm(comm)?;
            info_mut(s, info).map(drop)
        })
    }
}

mpi! {
    /// Makes an intercommunicator from two disjoint groups, each with its own intracommunicator;
    /// the leaders meet on `peer_comm` with `tag`.
    fn MPI_Intercomm_create / PMPI_Intercomm_create(local_comm: Handle, local_leader: c_int, peer_comm: Handle, remote_leader: c_int, tag: c_int, newintercomm: *mut Handle) on local_comm => {
        let out = out(newintercomm, "newintercomm")?;
        let local = running(|s| s.intra_comm(local_comm))?;
        let leader = usize::try_from(local_leader).ok().filter(|&r| r < local.size()).ok_or_else(|| {
            MpiError::new(MPI_ERR_RANK, format!("local leader {local_leader} is not in a communicator of {} ranks", local.size()))
        })?;
        let peer = if local.rank() == leader {
            if tag < 0 {
                return fail(MPI_ERR_TAG, format!("invalid tag {tag}"));
            }
            let peer = running(|s| s.core_comm(peer_comm))?;
            let rl = usize::try_from(remote_leader).ok().filter(|&r| r < peer.size()).ok_or_else(|| {
                MpiError::new(MPI_ERR_RANK, format!("remote leader {remote_leader} is not in a peer communicator of {} ranks", peer.size()))
            })?;
            if peer.world_rank_of(rl)? == my_world(&local) as usize {
                return fail(MPI_ERR_RANK, "the remote leader is this process: the groups must be disjoint");
            }
            Some((peer, rl))
        } else {
            None
        };
        *out = connect_groups(local_comm, &local, leader, peer.as_ref().map(|(c, rl)| (c, *rl, tag)))?;
        Ok(())
    }
}

mpi! {
    /// Makes an intercommunicator from two disjoint groups of MPI_COMM_WORLD without a parent
    /// communicator (MPI 4.1 §7.6.2): the processes of both groups first make a bridge
    /// communicator of them all, told apart from other such calls by `stringtag`, and each
    /// group its local one; then as MPI_Intercomm_create with the bridge as peer.
    fn MPI_Intercomm_create_from_groups / PMPI_Intercomm_create_from_groups(local_group: Handle, local_leader: c_int, remote_group: Handle, remote_leader: c_int, stringtag: *const std::ffi::c_char, _info: Handle, errhandler: Handle, newintercomm: *mut Handle) on NONE => {
        let out = out(newintercomm, "newintercomm")?;
        if stringtag.is_null() {
            return fail(MPI_ERR_ARG, "stringtag is NULL");
        }
        let tag = string_tag(std::ffi::CStr::from_ptr(stringtag).to_bytes());
        let (world, lg, rg) = running(|s| {
            crate::comm::valid_errhandler(s, errhandler)?;
            Ok((s.core_comm(MPI_COMM_WORLD)?, s.group(local_group)?, s.group(remote_group)?))
        })?;
        let leader_of = |g: &[u32], r: c_int, what: &str| {
            usize::try_from(r).ok().filter(|&r| r < g.len()).ok_or_else(|| {
                MpiError::new(MPI_ERR_RANK, format!("{what} leader {r} is not in a group of {}", g.len()))
            })
        };
        let ll = leader_of(&lg, local_leader, "local")?;
        let rl = leader_of(&rg, remote_leader, "remote")?;
        let me = my_world(&world);
        if !lg.contains(&me) {
            return fail(MPI_ERR_GROUP, "this process is not in the local group");
        }
        if rg.iter().any(|w| lg.contains(w)) {
            return fail(MPI_ERR_GROUP, "the local and remote groups must be disjoint");
        }
        let mut all: Vec<usize> = lg.iter().chain(rg.iter()).map(|&w| w as usize).collect();
        all.sort_unstable();
        let bridge = world.create_subset(&all, tag)?.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "bridge communicator"))?;
        let at = |w: u32| all.iter().position(|&x| x == w as usize).unwrap_or(0);
        let local_ranks: Vec<usize> = lg.iter().map(|&w| at(w)).collect();
        let local = bridge.create_subset(&local_ranks, tag)?.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "local communicator"))?;
        let swap = (local.rank() == ll).then_some((&bridge, at(rg[rl]), tag));
        let mine = Rec { world: me, pair: local.claim_context_pairs()?, ..Rec::default() };
        let (l, r) = exchange(&local, ll, swap, mine)?;
        let p = parts(&local, &world_of(&l), &world_of(&r), local.rank(), agreed_pair(&l, &r))?;
        let h = register_inter(MPI_COMM_WORLD, p, false)?;
        running(|s| {
            s.comm_mut(h)?.errhandler = errhandler;
            Ok(())
        })?;
        *out = h;
        Ok(())
    }
}

mpi! {
    /// Makes an intracommunicator of both groups: the group passing `high` = false first (if
    /// both pass the same, the group whose leader has the lower world rank).
    fn MPI_Intercomm_merge / PMPI_Intercomm_merge(intercomm: Handle, high: c_int, newintracomm: *mut Handle) on intercomm => {
        let out = out(newintracomm, "newintracomm")?;
        let inter = inter_arg(intercomm)?;
        let (local, l, r) = agree(inter, |c| Rec {
            world: my_world(c),
            flag: (high != 0) as u32,
            ..Rec::default()
        })?;
        let local_first = if l[0].flag != r[0].flag { l[0].flag == 0 } else { l[0].world < r[0].world };
        let (first, second) = if local_first { (&l, &r) } else { (&r, &l) };
        let members: Vec<u32> = first.iter().chain(second.iter()).map(|x| x.world).collect();
        let me = my_world(&local);
        let rank = members.iter().position(|&w| w == me).unwrap_or(0);
        let k = agreed_pair(&l, &r);
        let merged = local.derive(&members, rank, 2 * k)?;
        *out = register(intercomm, Some(merged), false)?;
        Ok(())
    }
}
