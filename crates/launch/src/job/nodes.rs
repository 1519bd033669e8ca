//! The node daemons of a multi-host job, from the launcher's side: which hosts get one, the
//! environment they pass on, starting them, and what they report (output, pids, exits, a
//! host that fails or says nothing).

use super::*;

/// Variables that describe the launcher's own host or session and so stay behind.
const HOST_SPECIFIC_ENV: [&str; 12] = [
    "HOSTNAME",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "DISPLAY",
    "XAUTHORITY",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
    "SSH_AUTH_SOCK",
    "TERM",
];

/// The launcher's environment for the ranks of other hosts, as MPICH's hydra passes it by
/// default (the ranks here inherit it anyway), less what names this host or session.
fn propagated_env() -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> {
    std::env::vars_os()
        .filter(|(k, _)| !HOST_SPECIFIC_ENV.iter().any(|h| k == *h))
        .map(|(k, v)| (k.into_vec(), v.into_vec()))
}

/// How the ranks of a job with hosts start: `None` when every host is this one (they run here
/// as any local job), else a node daemon per host through the launcher's remote shell.
pub(super) fn remote_plan(opts: &LaunchOptions) -> Result<Option<RemoteLaunch>, LaunchError> {
    let Some(hosts) = &opts.hosts else {
        return Ok(None);
    };
    if opts.grid.is_some() {
        return Err(LaunchError::Remote(
            "a job runs either on a grid or on hosts, not both".into(),
        ));
    }
    let this = sys::hostname();
    let local = hosts.iter().all(|h| is_this_host(&h.host, &this));
    // Only this host: run here as any local job, unless several named hosts are to get their
    // daemons here (`--launcher local`, the multi-host path on one machine).
    if local && (opts.launcher != Launcher::Local || hosts.len() == 1) {
        return Ok(None);
    }
    let (shell, form) = match opts.launcher {
        // Named hosts, all started here: the daemons' path on one machine.
        Launcher::Local => (Vec::new(), CommandForm::Quoted),
        Launcher::Ssh | Launcher::Rsh => (
            opts.launcher
                .remote_shell(|name| std::env::var(name).ok())
                .unwrap_or_default(),
            CommandForm::Quoted,
        ),
        // A job step per host of the allocation, the daemon its one task.
        Launcher::Slurm => (crate::remote::srun_shell(), CommandForm::Words),
    };
    let ferry = std::env::current_exe().map_err(|e| {
        LaunchError::Remote(format!(
            "cannot find the ferry executable for the node daemons: {e}"
        ))
    })?;
    Ok(Some(RemoteLaunch {
        nodes: hosts
            .iter()
            .map(|h| NodePlan::on(&h.host, h.ranks.clone()))
            .collect(),
        shell,
        form,
        ferry,
        grid: false,
    }))
}

impl Job {
    /// Starts a node daemon per host of `remote` with the job's description; the ranks are
    /// the daemons' (their pids arrive with STARTED).
    pub(super) fn start_nodes(
        &mut self,
        opts: &LaunchOptions,
        remote: &RemoteLaunch,
        port: u16,
        key: &JobKey,
    ) -> Result<(), LaunchError> {
        let mut host_of = vec![None; opts.np as usize];
        for node in &remote.nodes {
            for &rank in &node.ranks {
                match host_of.get_mut(rank as usize) {
                    Some(slot @ None) => *slot = Some(node.host.clone()),
                    _ => {
                        return Err(LaunchError::Remote(format!(
                            "rank {rank} is placed twice or is not below {}",
                            opts.np
                        )))
                    }
                }
            }
        }
        if let Some(rank) = host_of.iter().position(Option::is_none) {
            return Err(LaunchError::Remote(format!("rank {rank} has no host")));
        }
        let launcher = crate::remote::launcher_addresses(remote, port)?;
        let spec = JobSpec {
            job: self.id,
            key: key.clone(),
            launcher: String::new(),
            size: opts.np,
            ranks: Vec::new(),
            program: opts.program.as_bytes().to_vec(),
            args: opts.args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: propagated_env()
                .chain(
                    opts.extra_env
                        .iter()
                        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())),
                )
                // The daemons check their hosts' share against their cores.
                .chain(
                    opts.oversubscribe
                        .then(|| (crate::OVERSUBSCRIBE_ENV.as_bytes().to_vec(), b"1".to_vec())),
                )
                .collect(),
            cwd: std::env::current_dir()
                .map(|d| d.into_os_string().into_vec())
                .unwrap_or_default(),
            tag_output: opts.tag_output,
        };
        self.hosts = host_of.into_iter().flatten().collect();
        self.ranks.extend((0..opts.np).map(|_| Rank::new(None, 0)));
        let mut nodes = Nodes::start(remote, &spec, &launcher, self.settings.tree_fanout)?;
        if !sys::stdin_is_terminal() {
            if let Some(index) = nodes.links.iter().position(|l| l.ranks.contains(&0)) {
                forward_stdin(&mut nodes, index);
            }
        }
        self.node_kv = NodeKv::new(nodes.links.len());
        self.nodes = Some(nodes);
        Ok(())
    }

    /// Takes what the node daemons reported: output, pids, exits, failures.
    pub(super) fn take_node_events(&mut self) {
        while let Some((index, event)) = self.nodes.as_ref().and_then(Nodes::try_event) {
            self.node_event(index, event);
        }
        if self.nodes.is_some() {
            self.publish_proctable();
        }
    }

    /// Waits up to `timeout` for the node daemons to say something, then takes all they said.
    pub(super) fn wait_for_nodes(&mut self, timeout: Duration) {
        if let Some((index, event)) = self.nodes.as_ref().and_then(|n| n.wait_event(timeout)) {
            self.node_event(index, event);
            self.take_node_events();
        }
    }

    /// Takes one report of node daemon `index`.
    pub(super) fn node_event(&mut self, index: usize, event: NodeEvent) {
        let Some(nodes) = self.nodes.as_mut() else {
            return;
        };
        if let Some(link) = nodes.links.get_mut(index) {
            link.heard = true;
        }
        {
            match event {
                NodeEvent::Message(
                    message @ (NodeMessage::KvPut { .. }
                    | NodeMessage::KvGet { .. }
                    | NodeMessage::Fence),
                ) => {
                    for (node, answer) in self.node_kv.handle(index, message) {
                        nodes.send(node, &answer);
                    }
                }
                NodeEvent::Message(NodeMessage::Session { rank, state }) => {
                    let Some(r) = self.ranks.get_mut(rank as usize) else {
                        return;
                    };
                    match state {
                        Session::Connected => r.connected = true,
                        Session::Finalized => r.finalized = true,
                        Session::Closed { finalized } => {
                            r.finalized |= finalized;
                            r.closed_at.get_or_insert_with(Instant::now);
                        }
                    }
                }
                NodeEvent::Message(NodeMessage::Abort {
                    rank,
                    code,
                    message,
                }) => {
                    self.abort.get_or_insert(Outcome::Aborted {
                        rank,
                        code,
                        message,
                    });
                }
                NodeEvent::Message(NodeMessage::Output { stream, bytes, .. }) => {
                    let sink = match stream {
                        Stream::Stdout => Sink::Stdout,
                        Stream::Stderr => Sink::Stderr,
                    };
                    let _ = sink.write_locked(&bytes);
                }
                NodeEvent::Message(NodeMessage::Started { rank, pid }) => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        r.pid = pid;
                    }
                }
                NodeEvent::Message(NodeMessage::Exited { rank, exit }) => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        if r.status.is_none() {
                            r.status = Some(match exit {
                                RankExit::Code(c) => ExitStatus::from_raw((c & 0xff) << 8),
                                RankExit::Signal(s) => ExitStatus::from_raw(s & 0x7f),
                            });
                            r.exited_at = Some(Instant::now());
                            self.exit_order.push(rank);
                        }
                    }
                }
                NodeEvent::Message(NodeMessage::Failed { message, rank }) => {
                    // A child daemon's failure comes through its parent: the rank names the host.
                    let host = rank
                        .and_then(|r| self.hosts.get(r as usize))
                        .unwrap_or(&nodes.links[index].host)
                        .clone();
                    self.host_failure.get_or_insert(Outcome::HostFailed {
                        host,
                        detail: message,
                    });
                }
                NodeEvent::Message(other) => {
                    let host = nodes.links[index].host.clone();
                    self.host_failure.get_or_insert(Outcome::HostFailed {
                        host,
                        detail: format!("its node daemon sent {other:?}"),
                    });
                }
                NodeEvent::Closed(why) => {
                    nodes.links[index].closed = true;
                    let lost: Vec<u32> = nodes.links[index]
                        .ranks
                        .iter()
                        .copied()
                        .filter(|&r| self.ranks[r as usize].status.is_none())
                        .collect();
                    if lost.is_empty() {
                        return;
                    }
                    let status = nodes.exit_status(index, Duration::from_millis(200));
                    let link = &nodes.links[index];
                    let detail = match status {
                        Some(status) => format!(
                            "its node daemon ended ({status}; {why}) while ranks {lost:?} ran there"
                        ),
                        None => {
                            format!("lost its node daemon ({why}) while ranks {lost:?} ran there")
                        }
                    };
                    if self.fault_tolerant {
                        // Its ranks died with it (they end with their daemon): each is judged
                        // as a rank killed, and the job goes on.
                        eprintln!(
                            "ferry run: host {}: {detail}; the job goes on without them (--fault-tolerant)",
                            link.host
                        );
                    } else {
                        self.host_failure.get_or_insert(Outcome::HostFailed {
                            host: link.host.clone(),
                            detail,
                        });
                    }
                    // Nothing more will be heard of them.
                    for r in lost {
                        let rank = &mut self.ranks[r as usize];
                        rank.status = Some(ExitStatus::from_raw(libc::SIGKILL));
                        rank.exited_at = Some(Instant::now());
                        rank.judged = !self.fault_tolerant;
                        if self.fault_tolerant {
                            self.exit_order.push(r);
                        }
                    }
                }
            }
        }
    }

    /// Names a host whose daemon has said nothing within the connect timeout (a host that does
    /// not answer, an ssh that waits for it).
    pub(super) fn check_silent_hosts(&mut self) {
        let Some(nodes) = self.nodes.as_ref() else {
            return;
        };
        let limit = self.settings.connect_timeout;
        if self.host_failure.is_some() || self.started.elapsed() < limit {
            return;
        }
        if let Some(link) = nodes.links.iter().find(|l| !l.heard && !l.closed) {
            self.host_failure = Some(Outcome::HostFailed {
                host: link.host.clone(),
                detail: format!(
                    "its node daemon did not answer within {} s (FERRY_CONNECT_TIMEOUT)",
                    limit.as_secs()
                ),
            });
        }
    }

    /// A lost host is the cause of what its ranks' peers report (a lost connection, an abort):
    /// before blaming a rank, give the node daemons' links a moment to tell of a host that
    /// failed, which then names the job's end instead.
    pub(super) fn host_failure_first(&mut self, outcome: Outcome) -> Outcome {
        if self.nodes.is_none() {
            return outcome;
        }
        let until = Instant::now() + HOST_FAILURE_GRACE;
        loop {
            self.take_node_events();
            if let Some(failure) = self.host_failure.take() {
                return failure;
            }
            if Instant::now() >= until {
                return outcome;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Copies our standard input to rank 0's node daemon, on a thread of its own (detached: a
/// read of a terminal-less stdin may block past the job's end).
fn forward_stdin(nodes: &mut Nodes, index: usize) {
    let Some(writer) = nodes.stdin_writer(index) else {
        return;
    };
    let _ = thread::Builder::new()
        .name("ferry-stdin".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut input = io::stdin().lock();
            loop {
                let n = match io::Read::read(&mut input, &mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => 0,
                };
                let frame = NodeMessage::Stdin(buf[..n].to_vec());
                if !crate::remote::write_frame(&writer, &frame) || n == 0 {
                    return;
                }
            }
        });
}
