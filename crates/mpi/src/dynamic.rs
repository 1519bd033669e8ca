//! Dynamic processes (MPI 4.1 chapter 11) within one `ferry run` job: starting processes
//! (`MPI_Comm_spawn`, `MPI_Comm_spawn_multiple`, `MPI_Comm_get_parent`), ports
//! (`MPI_Open_port`, `MPI_Comm_accept`, `MPI_Comm_connect`), the name service
//! (`MPI_Publish_name`, `MPI_Lookup_name`), and `MPI_Comm_join` (`MPI_Comm_disconnect`, for any
//! communicator, is in `crate::comm`).
//!
//! Spawning: the root resolves each command (info `path`, its working directory, `PATH`; info
//! `wdir`; `host`, `arch`, `file` and `soft` are accepted and ignored, as every process runs on
//! this host and every requested one is started) and asks the launcher for a new world; the
//! spawning group learns the new universe ranks by broadcast and both sides build the
//! intercommunicator on the context pairs the root claimed, which the launcher hands to the
//! children (`ferry_core::spawn::ParentInfo`). No message is needed for it: connections are
//! made when first used (see `ferry_core::spawn`).
//!
//! A port is named `ferry-port:<universe rank>:<number>` after the process that opened it. The
//! two roots meet on a hidden communicator over every process of the job (its context is
//! derived from the world's, the same in every world, without a message, as `MPI_Comm_idup`
//! derives one), with the port number as tag: the connecting root sends its group's records
//! there, the accepting root takes the first connection that arrives, and from then on it is
//! `MPI_Intercomm_create`'s exchange. Names are published with the launcher, which every
//! process of the job reaches.
//!
//! Not supported: connecting to another job's processes (`MPI_ERR_PORT`), and spawning on
//! other hosts (every spawned process runs on the launcher's host).

use crate::abi::*;
use crate::check::out;
use crate::error::{fail, MpiError, Res};
use crate::state::{running, with, State};
use ferry_core::Comm;
use std::ffi::{c_char, c_int, CStr};

/// The pair number, among those derived from MPI_COMM_WORLD's context, of the hidden
/// communicator roots meet on (no `MPI_Comm_idup` count comes near it).
const MEETING_SLOT: u32 = 0xffff_fff0;

/// Tag of `MPI_Comm_join` meetings (port numbers stay below it).
pub(crate) const JOIN_TAG: i32 = 0x3fff_ffff;

pub(crate) const PORT_PREFIX: &str = "ferry-port:";

/// The hidden communicator over every process of the job (every world: rank r is universe
/// rank r) that roots meet on. Its context is derived from the world's, which is the same in
/// every world, without a message, as `MPI_Comm_idup` derives one.
pub(crate) fn meeting(s: &mut State) -> Res<Comm> {
    if let Some(c) = &s.meeting {
        return Ok(c.clone());
    }
    let world = s.core_comm(MPI_COMM_WORLD)?;
    let k = crate::comm::derived_pair(world.context_id(), MEETING_SLOT);
    if !s.derived_pairs.insert(k) {
        return fail(
            MPI_ERR_INTERN,
            "the context of port connections is in use here (hash collision with an MPI_Comm_idup)",
        );
    }
    let c = match &s.world {
        Some(w) => w.universe_comm(2 * k),
        None => return fail(MPI_ERR_OTHER, "MPI is not initialized"),
    };
    s.meeting = Some(c.clone());
    Ok(c)
}

/// This process's universe rank (its MPI_COMM_WORLD rank in the launcher's world).
pub(crate) fn my_uid(s: &State) -> Res<u32> {
    match &s.world {
        Some(w) => Ok(w.universe_rank()),
        None => fail(MPI_ERR_OTHER, "MPI is not initialized"),
    }
}

/// A port named by the program: its owner's universe rank, its number, and whether this
/// process is the owner.
pub(crate) struct Port {
    pub(crate) owner: usize,
    pub(crate) number: i32,
    pub(crate) own: bool,
}

/// The port `port` names, which must be one of this job's.
pub(crate) unsafe fn port_of(s: &State, port: *const c_char) -> Res<Port> {
    // SAFETY: this function's contract is the unsafe operations' own: `port`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let (owner, number) = parse_port(port, UNIVERSE_CAP)?;
        Ok(Port {
            owner,
            number,
            own: owner == my_uid(s)? as usize,
        })
    }
}

/// Most universe ranks a port's owner may have (`ferry_core`'s limit on a job's processes).
const UNIVERSE_CAP: usize = 1 << 16;

/// The (owner's universe rank, port number) of a port name.
unsafe fn parse_port(port: *const c_char, world_size: usize) -> Res<(usize, i32)> {
    // SAFETY: this function's contract is the unsafe operations' own: `port`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if port.is_null() {
            return fail(MPI_ERR_PORT, "port_name is NULL");
        }
        let text = CStr::from_ptr(port).to_string_lossy();
        let parsed = text.strip_prefix(PORT_PREFIX).and_then(|rest| {
            let (rank, number) = rest.split_once(':')?;
            Some((rank.parse::<usize>().ok()?, number.parse::<i32>().ok()?))
        });
        match parsed {
        Some((rank, number)) if rank < world_size && (0..JOIN_TAG).contains(&number) => {
            Ok((rank, number))
        }
        Some(_) => fail(
            MPI_ERR_PORT,
            format!("port {text:?} is not one of this job's (a connection to another job's processes is not supported)"),
        ),
        None => fail(MPI_ERR_PORT, format!("{text:?} is not a port name of ferry's")),
    }
    }
}

/// The intercommunicator of `comm`'s group (collective over it) with the group its `root`
/// meets: only the root calls `meet` for the hidden communicator, the remote root's world rank
/// on it and the tag.
pub(crate) fn connect_at_root(
    comm: Handle,
    root: c_int,
    meet: impl FnOnce() -> Res<(Comm, usize, i32)>,
) -> Res<Handle> {
    let local = running(|s| s.intra_comm(comm))?;
    let root = crate::coll::root_arg(&local, root)?;
    let met = if local.rank() == root {
        Some(meet()?)
    } else {
        None
    };
    crate::inter::connect_groups(
        comm,
        &local,
        root,
        met.as_ref().map(|(m, r, t)| (m, *r, *t)),
    )
}

pub(crate) unsafe fn write_name(text: &str, out: *mut c_char, cap: usize) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `out`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if out.is_null() {
            return fail(MPI_ERR_ARG, "the output string is NULL");
        }
        if text.len() >= cap {
            return fail(
                MPI_ERR_INTERN,
                format!("{text:?} does not fit in {cap} bytes"),
            );
        }
        std::ptr::copy_nonoverlapping(text.as_ptr(), out as *mut u8, text.len());
        *out.add(text.len()) = 0;
        Ok(())
    }
}

/// Writes `mine` to the socket and reads as many bytes back.
pub(crate) unsafe fn socket_swap(fd: c_int, mine: &[u8], theirs: &mut [u8]) -> std::io::Result<()> {
    // SAFETY: this function's contract is the unsafe operations' own, and its caller keeps it
    // (MPI's contract for the call it serves).
    unsafe {
        use std::io::{Read, Write};
        use std::os::fd::FromRawFd;
        // The socket stays the program's: borrowed as a File that is never dropped (closed).
        let mut socket = std::mem::ManuallyDrop::new(std::fs::File::from_raw_fd(fd));
        socket.write_all(mine)?;
        socket.read_exact(theirs)
    }
}

/// The launcher key of a published service name.
pub(crate) fn service_key(service: *const c_char) -> Res<String> {
    if service.is_null() {
        return fail(MPI_ERR_ARG, "service_name is NULL");
    }
    // SAFETY: a NUL-terminated string, per MPI.
    let name = unsafe { CStr::from_ptr(service) }.to_string_lossy();
    Ok(format!("mpi-service:{name}"))
}

/// What the launcher holds for `key` ("" once unpublished).
pub(crate) fn looked_up(key: &str) -> Res<Option<String>> {
    let found = on_world(|w| Ok(w.lookup(key)?))?;
    Ok(found.filter(|v| !v.is_empty()))
}

pub(crate) fn publish(key: &str, value: &str) -> Res {
    on_world(|w| Ok(w.publish(key, value)?))
}

/// Runs `f` on the runtime's world.
pub(crate) fn on_world<T>(f: impl FnOnce(&ferry_core::World) -> Res<T>) -> Res<T> {
    with(|s| match &s.world {
        Some(w) => f(w),
        None => fail(MPI_ERR_OTHER, "MPI is not initialized"),
    })
}

/// MPI_UNIVERSE_SIZE: `FERRY_UNIVERSE_SIZE` (`ferry run --universe-size`), else what a
/// process manager speaking PMI says (when positive), else the larger of the world's size and
/// the cores here; never below the world's size.
pub(crate) fn universe_size(world: Option<&ferry_core::World>) -> c_int {
    let world_size = world.map_or(1, |w| w.size());
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    // Checked when MPI_Init read the settings: a value out of range never gets here.
    let get = |name: &str| std::env::var(name).ok();
    let asked = ferry_core::settings::number(&get, ferry_wire_env::UNIVERSE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .or_else(|| Some(world?.process_manager_universe_size()? as usize));
    let n = asked.unwrap_or(cores).max(world_size);
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// MPI_APPNUM: which command of an MPI_Comm_spawn_multiple (or of hydra's `:`-separated
/// command line) this process runs; 0 otherwise.
pub(crate) fn appnum(world: Option<&ferry_core::World>) -> c_int {
    std::env::var(ferry_wire_env::APPNUM)
        .ok()
        .and_then(|v| v.parse().ok())
        .or_else(|| world?.process_manager_appnum())
        .unwrap_or(0)
}

use ferry_core::spawn::env as ferry_wire_env;
use ferry_core::spawn::{App, ParentInfo};

/// In a process started by MPI_Comm_spawn (at MPI_Init): connects to the spawning group and
/// makes MPI_Comm_get_parent's intercommunicator. Nothing for other processes.
pub(crate) fn join_parent() -> Res {
    let Some(parent) = ParentInfo::of_this_process()? else {
        return Ok(());
    };
    // Publishes our address, for processes of other worlds that will connect to us.
    on_world(|w| Ok(w.open_to_other_worlds()?))?;
    let world = running(|s| s.core_comm(MPI_COMM_WORLD))?;
    let h = crate::inter::between(
        MPI_COMM_WORLD,
        &world,
        world.world_ranks(),
        &parent.group,
        world.rank(),
        parent.pair,
    )?;
    running(|s| {
        let obj = s.comm_mut(h)?;
        obj.name = "MPI_COMM_PARENT".into();
        s.parent = h;
        Ok(())
    })
}

/// A C string (NULL: empty).
unsafe fn c_text(p: *const c_char) -> String {
    // SAFETY: this function's contract is the unsafe operations' own: `p`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// The strings of a NULL-terminated `argv` (MPI_ARGV_NULL: none).
unsafe fn c_argv(argv: *mut *mut c_char) -> Vec<String> {
    // SAFETY: this function's contract is the unsafe operations' own: `argv`, as the caller
    // promises, is NULL or valid for what the MPI call it serves reads and writes through it.
    unsafe {
        let mut out = Vec::new();
        if argv.is_null() {
            return out;
        }
        let mut i = 0;
        loop {
            let a = *argv.add(i);
            if a.is_null() {
                return out;
            }
            out.push(c_text(a));
            i += 1;
        }
    }
}

/// The value of `key` in `info` (MPI_INFO_NULL: none).
fn info_value(info: Handle, key: &str) -> Res<Option<String>> {
    if info == MPI_INFO_NULL {
        return Ok(None);
    }
    running(|s| {
        let kv = s
            .infos
            .get(info)
            .ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {info:#x}")))?;
        Ok(kv.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    })
}

/// One command of a spawn as the launcher runs it. The program is made absolute here, where
/// the root's directory and the info's `path` are known: a name with a `/` is taken from the
/// root's working directory, a bare name from the info's `path` directories, then the root's
/// directory, then `PATH`; one that is not there is MPI_ERR_SPAWN. `wdir` defaults to the root's directory.
/// Other keys (`host`, `arch`, `file`, `soft`) are accepted and ignored: every process runs on
/// this host, and `soft` is moot as every requested process is started.
pub(crate) unsafe fn app(
    command: *const c_char,
    argv: *mut *mut c_char,
    procs: c_int,
    info: Handle,
) -> Res<App> {
    // SAFETY: this function's contract is the unsafe operations' own: `command` and `argv`, as
    // the caller promises, are NULL or valid for what the MPI call it serves reads and writes
    // through them.
    unsafe {
        if command.is_null() {
            return fail(MPI_ERR_ARG, "command is NULL");
        }
        let procs = u32::try_from(procs)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                MpiError::new(MPI_ERR_ARG, format!("maxprocs {procs} is not positive"))
            })?;
        let cwd = std::env::current_dir()
            .map_err(|e| MpiError::new(MPI_ERR_SPAWN, format!("no working directory: {e}")))?;
        let name = c_text(command);
        let path = info_value(info, "path")?;
        let executable = |p: &std::path::Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        let program = if name.contains('/') {
            Some(cwd.join(&name)).filter(|p| executable(p))
        } else {
            let path_env = std::env::var("PATH").unwrap_or_default();
            let dirs: Vec<std::path::PathBuf> = path
                .iter()
                .flat_map(|p| p.split(':'))
                .map(std::path::PathBuf::from)
                .chain(std::iter::once(cwd.clone()))
                .chain(path_env.split(':').map(std::path::PathBuf::from))
                .collect();
            dirs.into_iter()
                .map(|d| cwd.join(d).join(&name))
                .find(|p| executable(p))
        };
        // Checked here so that a missing program is MPI_ERR_SPAWN for the caller, not the end of
        // the job (the launcher ends it if it cannot start a process it was asked for).
        let program = program.ok_or_else(|| {
        MpiError::new(
            MPI_ERR_SPAWN,
            format!("MPI_Comm_spawn: no executable program {name:?} (looked in the info's path, {}, and PATH)", cwd.display()),
        )
    })?;
        let wdir = match info_value(info, "wdir")? {
            Some(w) if !w.is_empty() => cwd.join(w),
            _ => cwd,
        };
        Ok(App {
            procs,
            command: program.to_string_lossy().into_owned(),
            wdir: wdir.to_string_lossy().into_owned(),
            args: c_argv(argv),
        })
    }
}

/// MPI_Comm_spawn(_multiple), collective over `comm`: the root asks the launcher for a world
/// running what `apps` gives (only the root calls it), everyone learns its universe ranks,
/// takes them as peers and makes the intercommunicator on the pairs the root claimed.
pub(crate) unsafe fn spawn(
    comm: Handle,
    root: c_int,
    requested: impl FnOnce() -> u32,
    apps: impl FnOnce() -> Res<Vec<App>>,
    intercomm: *mut Handle,
    errcodes: *mut c_int,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `intercomm` and
    // `errcodes`, as the caller promises, are NULL or valid for what the MPI call it serves reads
    // and writes through them.
    unsafe {
        let out = out(intercomm, "intercomm")?;
        let local = running(|s| s.intra_comm(comm))?;
        let root = crate::coll::root_arg(&local, root)?;
        // The new processes dial every one of us: each publishes its address first.
        on_world(|w| Ok(w.open_to_other_worlds()?))?;
        local.barrier()?;
        // [ok, base, size, pair]
        let mut word = [0u32; 4];
        let mut why = None;
        if local.rank() == root {
            word[2] = requested();
            let asked = apps().and_then(|apps| {
                let size: u32 = apps.iter().map(|a| a.procs).sum();
                let pair = local.claim_context_pairs()?;
                let parent = ParentInfo {
                    pair,
                    group: local.world_ranks().to_vec(),
                };
                let base = on_world(|w| Ok(w.spawn_world(&parent, apps)?))?;
                Ok([1, base, size, pair])
            });
            match asked {
                Ok(w) => word = w,
                Err(e) => why = Some(e),
            }
        }
        local.bcast(&mut word, root)?;
        let [ok, base, size, pair] = word;
        if ok == 0 {
            *out = MPI_COMM_NULL;
            if !errcodes.is_null() && local.rank() == root {
                for i in 0..size as usize {
                    *errcodes.add(i) = MPI_ERR_SPAWN;
                }
            }
            return Err(why.unwrap_or_else(|| {
                MpiError::new(MPI_ERR_SPAWN, "MPI_Comm_spawn failed at the root")
            }));
        }
        let children: Vec<u32> = (base..base + size).collect();
        on_world(|w| {
            w.add_peers(&children);
            Ok(())
        })?;
        *out = crate::inter::between(
            comm,
            &local,
            local.world_ranks(),
            &children,
            local.rank(),
            pair,
        )?;
        if !errcodes.is_null() {
            for i in 0..size as usize {
                *errcodes.add(i) = MPI_SUCCESS;
            }
        }
        Ok(())
    }
}
