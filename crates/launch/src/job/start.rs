//! Starting ranks on this host: the launcher's own ranks, one after the other, and the
//! processes of a world spawned by `MPI_Comm_spawn`.

use super::*;
use crate::hosts::binding::{BindTo, Policy};
use crate::node::affinity::{self, HostAffinity};

/// Tells a rank who it is and where its bootstrap server is (`ferry_wire::pmi::env`): the
/// job key goes in its environment, never on its command line.
pub(crate) fn bootstrap_env(
    command: &mut Command,
    addr: SocketAddr,
    rank: u32,
    size: u32,
    job: u64,
    key: &JobKey,
) {
    command
        .env(env::ADDR, addr.to_string())
        .env(env::RANK, rank.to_string())
        .env(env::SIZE, size.to_string())
        .env(env::JOB_ID, job.to_string())
        .env(env::JOB_KEY, key.to_hex());
}

/// Why rank `rank` could not start: a shortage of descriptors explained (which limit, what to
/// raise), else the operating system's error.
fn spawn_failed(rank: u32, program: &std::ffi::OsStr, source: io::Error) -> LaunchError {
    match crate::limits::shortage(&source) {
        Some(shortage) => LaunchError::OutOfDescriptors {
            rank,
            program: program.to_owned(),
            shortage,
        },
        None => LaunchError::Spawn {
            rank,
            program: program.to_owned(),
            source,
        },
    }
}

impl Job {
    /// Starts the ranks one after the other. Between them it reaps the ranks that have ended
    /// and looks at the launcher's signals and the timeout, so that neither waits until the
    /// last rank has started: `Some` is what stopped it (the caller ends the job with it).
    pub(super) fn start_ranks(
        &mut self,
        opts: &LaunchOptions,
        server: &BootstrapServer,
        key: &JobKey,
        grid: Option<&GridJob>,
        signals: &Signals,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Option<Outcome>, LaunchError> {
        let affinity = self.local_affinity(opts)?;
        for rank in 0..opts.np {
            if let Some(signal) = signals.take() {
                return Ok(Some(Outcome::Interrupted { signal }));
            }
            if let Some((at, after)) = deadline {
                if Instant::now() >= at {
                    return Ok(Some(Outcome::TimedOut { after }));
                }
            }
            if rank % REAP_EVERY == 0 {
                self.reap();
            }
            self.spawn(opts, rank, server.addr(), key, grid, &affinity)?;
        }
        Ok(None)
    }

    /// The binding of the ranks here: the policy of the `FERRY_MAP_BY` … variables (the
    /// options' environment first, then ours), else bound to cores as [`LaunchOptions::bind`]
    /// left `cores`. A policy this host cannot meet stops the job before its first rank.
    fn local_affinity(&self, opts: &LaunchOptions) -> Result<HostAffinity, LaunchError> {
        let lookup = |name: &str| {
            opts.extra_env
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(name).ok())
        };
        let fallback = Policy {
            bind_to: Some(match self.cores.is_empty() {
                true => BindTo::None,
                false => BindTo::Core,
            }),
            ..Policy::default()
        };
        let ranks: Vec<u32> = (0..opts.np).collect();
        affinity::policy_from(lookup, fallback)
            .and_then(|policy| HostAffinity::plan(&sys::hostname(), &ranks, &policy))
            .map_err(|e| LaunchError::Spawn {
                rank: 0,
                program: opts.program.clone(),
                source: io::Error::other(e),
            })
    }

    pub(super) fn spawn(
        &mut self,
        opts: &LaunchOptions,
        rank: u32,
        addr: SocketAddr,
        key: &JobKey,
        grid: Option<&GridJob>,
        affinity: &HostAffinity,
    ) -> Result<(), LaunchError> {
        // Rank 0 reads our standard input, unless that is a terminal: the ranks run in process
        // groups (or sessions) of their own, and reading the terminal from a background group
        // stops the reader, from another session it takes keystrokes meant for the shell.
        let stdin = if rank == 0 && !sys::stdin_is_terminal() {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        let mut command = match grid {
            Some(g) => g.command(rank, &opts.program),
            None => Command::new(&opts.program),
        };
        command
            .args(&opts.args)
            .envs(opts.extra_env.iter().map(|(k, v)| (k, v)));
        bootstrap_env(&mut command, addr, rank, opts.np, self.id, key);
        command
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A local or testbed job's ranks all run on this machine's cores.
        sys::rank_group(&mut command, opts.np as usize <= self.usable_cores);
        sys::end_with_launcher(&mut command, libc::SIGKILL);
        let user_set = std::env::var_os(crate::HOST_CORES_ENV).is_some()
            || opts
                .extra_env
                .iter()
                .any(|(k, _)| k == crate::HOST_CORES_ENV);
        affinity.apply(&mut command, rank as usize, user_set);
        let child = command.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => LaunchError::ProgramNotFound(opts.program.clone()),
            io::ErrorKind::PermissionDenied if sys::names_a_directory(&opts.program) => {
                LaunchError::IsADirectory(opts.program.clone())
            }
            io::ErrorKind::PermissionDenied => LaunchError::NotExecutable(opts.program.clone()),
            _ => spawn_failed(rank, &opts.program, source),
        })?;
        if let Some(g) = grid {
            self.hosts.push(g.host(rank).to_string());
        }
        self.watch(child, rank, opts.tag_output, &opts.program)
    }

    /// Keeps `child`, the process of universe rank `rank`, and forwards its output.
    pub(super) fn watch(
        &mut self,
        mut child: Child,
        rank: u32,
        tag_output: bool,
        program: &std::ffi::OsStr,
    ) -> Result<(), LaunchError> {
        let pid = child.id();
        let prefix = tag_output.then(|| format!("[{rank}] "));
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        self.ranks.push(Rank::new(Some(child), pid));
        if let Some(watchdog) = self.watchdog.as_mut() {
            if io::Write::write_all(watchdog, format!("{pid}\n").as_bytes()).is_err() {
                // It is gone: the job runs on without it.
                self.watchdog = None;
            }
        }
        let spawn_error = |source| spawn_failed(rank, program, source);
        if self.output.is_none() {
            self.output = Some(output::Forwarder::start().map_err(spawn_error)?);
        }
        let Some(forwarder) = self.output.as_ref() else {
            return Ok(());
        };
        if let Some(pipe) = stdout {
            forwarder
                .add(pipe, Sink::Stdout, prefix.clone())
                .map_err(spawn_error)?;
        }
        if let Some(pipe) = stderr {
            forwarder
                .add(pipe, Sink::Stderr, prefix)
                .map_err(spawn_error)?;
        }
        Ok(())
    }

    /// Starts the processes of a spawned world: universe ranks `base..`, world ranks from 0,
    /// the commands in order. A process that cannot be started is `Err` (the ranks before it
    /// run; the job then ends).
    pub(super) fn spawn_world(
        &mut self,
        base: u32,
        world: u32,
        parent: &str,
        apps: &[ferry_wire::pmi::App],
    ) -> Result<(), String> {
        let Some(sp) = self.spawner.as_ref() else {
            return Err("this launcher cannot spawn processes".into());
        };
        let (addr, key, extra_env, tag) =
            (sp.addr, sp.key.clone(), sp.extra_env.clone(), sp.tag_output);
        if self.ranks.len() != base as usize {
            return Err(format!(
                "internal: new world at universe rank {base}, but the job has {} processes",
                self.ranks.len()
            ));
        }
        let size: u32 = apps.iter().map(|a| a.procs).sum();
        self.worlds.push((base, size));
        let mut rank = 0u32;
        for (appnum, app) in apps.iter().enumerate() {
            for _ in 0..app.procs {
                let mut command = Command::new(&app.command);
                if !app.wdir.is_empty() {
                    command.current_dir(&app.wdir);
                }
                command
                    .args(&app.args)
                    .envs(extra_env.iter().map(|(k, v)| (k, v)));
                bootstrap_env(&mut command, addr, rank, size, self.id, &key);
                command
                    .env(env::UNIVERSE_BASE, base.to_string())
                    .env(env::WORLD_INDEX, world.to_string())
                    .env(env::PARENT, parent)
                    .env(env::APPNUM, appnum.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let here = self.ranks.len() + size as usize;
                sys::rank_group(&mut command, here <= self.usable_cores);
                sys::end_with_launcher(&mut command, libc::SIGKILL);
                let child = command.spawn().map_err(|e| {
                    format!(
                        "cannot start {:?}: {}",
                        app.command,
                        crate::limits::explain(&e)
                    )
                })?;
                self.watch(child, base + rank, tag, std::ffi::OsStr::new(&app.command))
                    .map_err(|e| e.to_string())?;
                rank += 1;
            }
        }
        Ok(())
    }
}
