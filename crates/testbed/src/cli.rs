//! `ferry testbed up|run|link|down|ssh-config|paths`: the command-line face of the testbed.

use crate::{remove, run_prefix, Plan, Testbed, UpOptions};
use ferry_grid::{path, Topology};
use std::ffi::OsString;
use std::path::PathBuf;

/// Arguments of `ferry testbed`.
#[derive(Debug, clap::Args)]
pub struct TestbedArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: TestbedAction,
}

/// The testbed subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TestbedAction {
    /// Build the grid's namespaces, bridges, NAT and rate limits (needs root); prints the prefix.
    Up {
        /// The grid file.
        grid: PathBuf,
        /// Name prefix of this testbed (default fy<pid>-).
        #[arg(long)]
        prefix: Option<String>,
        /// Make every host and front node look like its own machine (hostname, /tmp,
        /// /dev/shm, IPC, boot_id, machine-id) and run its own sshd; prints the ssh command
        /// that reaches them.
        #[arg(long)]
        ssh: bool,
        /// Also run a Slurm cluster on the first cluster's hosts (implies --ssh): munged and
        /// slurmctld on its first host, a slurmd on each; prints SLURM_CONF.
        #[arg(long)]
        slurm: bool,
    },
    /// Print the ssh command that reaches the hosts of a testbed built with --ssh.
    SshConfig {
        /// Prefix of the testbed.
        #[arg(long)]
        prefix: String,
    },
    /// Run a command on one host (or front node) of a standing testbed (with --ssh: as a login
    /// there would, in all of the host's namespaces).
    Run {
        /// The grid file.
        grid: PathBuf,
        /// Prefix of the testbed (default: the only one standing).
        #[arg(long)]
        prefix: Option<String>,
        /// Host or front node name from the grid file.
        host: String,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
    /// Take one rail of a host down or up again on a standing testbed (rail 0: its own link,
    /// N: its address on the cluster's N-th [[cluster.link]]).
    Link {
        /// The grid file.
        grid: PathBuf,
        /// Prefix of the testbed (default: the only one standing).
        #[arg(long)]
        prefix: Option<String>,
        /// Host name from the grid file.
        host: String,
        /// Rail number.
        rail: usize,
        /// The new state.
        state: LinkState,
    },
    /// Remove a testbed, also after a crash (default: every testbed's leftovers, fy*-).
    Down {
        /// The grid file (optional; removal goes by prefix).
        grid: Option<PathBuf>,
        /// Prefix of the testbed to remove.
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Print the grid's path matrix (no root needed).
    Paths {
        /// The grid file.
        grid: PathBuf,
    },
    /// Forward frames between two devices, each way after a delay: what `up` starts in the
    /// switch namespace for a link with `wan_delay` (see `ferry_testbed::delay`).
    #[command(hide = true)]
    Delay {
        /// One device.
        a: String,
        /// The other device.
        b: String,
        /// The one-way delay in microseconds.
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
        delay_us: u64,
    },
}

/// State of a link for `ferry testbed link`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LinkState {
    /// Carries traffic.
    Up,
    /// Cut.
    Down,
}

/// `println!` that does not panic when stdout is gone (`ferry testbed up | head -1`): what
/// was built stays built, and the exit status says so.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

fn load(grid: &std::path::Path) -> Result<Topology, String> {
    Topology::load(grid).map_err(|e| e.to_string())
}

/// Runs `ferry testbed …`; returns the exit status.
pub fn testbed_command(args: TestbedArgs) -> i32 {
    let result: Result<i32, String> = (|| match args.action {
        TestbedAction::Up {
            grid,
            prefix,
            ssh,
            slurm,
        } => {
            let topology = load(&grid)?;
            let prefix = prefix.unwrap_or_else(run_prefix);
            let started = std::time::Instant::now();
            let options = UpOptions {
                ssh,
                slurm,
                ..UpOptions::default()
            };
            let testbed =
                Testbed::up_with(&topology, &prefix, &options).map_err(|e| e.to_string())?;
            let took = started.elapsed();
            let ssh_command = testbed.ssh_command();
            let slurm = testbed
                .slurm_conf()
                .zip(testbed.slurm_head().map(str::to_string));
            let plan = testbed.keep();
            outln!(
                "testbed {prefix} is up in {:.2} s: namespaces {}",
                took.as_secs_f64(),
                plan.all_namespaces().join(" ")
            );
            if let Some(ssh_command) = ssh_command {
                outln!("ssh to a host:  {} HOST", ssh_command.join(" "));
            }
            if let Some((conf, head)) = slurm {
                outln!(
                    "slurm:          SLURM_CONF={} (head {head}; `ferry testbed run` sets it), e.g. ferry testbed run {} {head} -- sinfo",
                    conf.display(),
                    grid.display()
                );
            }
            outln!(
                "run on a host:  ferry testbed run {} HOST -- CMD",
                grid.display()
            );
            outln!("remove it:      ferry testbed down --prefix {prefix}");
            Ok(0)
        }
        TestbedAction::Run {
            grid,
            prefix,
            host,
            command,
        } => {
            let topology = load(&grid)?;
            let known = topology.cluster_of(&host).is_some();
            if !known {
                return Err(format!(
                    "{}: no host or front node {host:?}",
                    grid.display()
                ));
            }
            crate::preflight().map_err(|e| e.to_string())?;
            let prefix = match prefix {
                Some(p) => p,
                None => crate::standing_prefix(&host).map_err(|e| e.to_string())?,
            };
            let ns = format!("{prefix}{host}");
            // A host with its own sshd is entered as a login there would be.
            let enter = match crate::ssh::host_command(&prefix, &host) {
                Ok(argv) => argv,
                Err(crate::TestbedError::NoSsh { .. }) => {
                    ["ip", "netns", "exec", &ns].map(String::from).to_vec()
                }
                Err(e) => return Err(e.to_string()),
            };
            let status = std::process::Command::new(&enter[0])
                .args(&enter[1..])
                .args(&command)
                .status()
                .map_err(|e| format!("`{} …`: {e}", enter.join(" ")))?;
            Ok(status.code().unwrap_or(128 + 9))
        }
        TestbedAction::Link {
            grid,
            prefix,
            host,
            rail,
            state,
        } => {
            let topology = load(&grid)?;
            crate::preflight().map_err(|e| e.to_string())?;
            let prefix = match prefix {
                Some(p) => p,
                None => crate::standing_prefix(&host).map_err(|e| e.to_string())?,
            };
            let plan = Plan::new(&topology, &prefix).map_err(|e| e.to_string())?;
            let argv = plan
                .link_command(&host, rail, state == LinkState::Up)
                .map_err(|e| e.to_string())?;
            crate::run(&argv).map_err(|e| e.to_string())?;
            outln!("{}", argv.join(" "));
            Ok(0)
        }
        TestbedAction::Down { grid, prefix } => {
            if let Some(grid) = grid {
                load(&grid)?;
            }
            crate::preflight().map_err(|e| e.to_string())?;
            let removed = remove(prefix.as_deref()).map_err(|e| e.to_string())?;
            outln!(
                "removed {} namespaces{}",
                removed.len(),
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", removed.join(" "))
                }
            );
            Ok(0)
        }
        TestbedAction::SshConfig { prefix } => {
            crate::check_prefix(&prefix).map_err(|e| e.to_string())?;
            let config = crate::ssh::ssh_config_path(&prefix);
            if !config.is_file() {
                return Err(format!(
                    "testbed {prefix} has no {} (was it built with `ferry testbed up --ssh`?)",
                    config.display()
                ));
            }
            outln!("{}", crate::ssh::ssh_command(&prefix).join(" "));
            Ok(0)
        }
        TestbedAction::Paths { grid } => {
            let topology = load(&grid)?;
            print!("{}", path::render_matrix(&topology.rank_guids()));
            Ok(0)
        }
        TestbedAction::Delay { a, b, delay_us } => {
            crate::delay::forward(&a, &b, std::time::Duration::from_micros(delay_us))
                .map_err(|e| e.to_string())?;
            Ok(0)
        }
    })();
    result.unwrap_or_else(|e| {
        eprintln!("ferry testbed: {e}");
        1
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: TestbedArgs,
    }

    #[test]
    fn link_takes_host_rail_and_state() {
        let cli = Cli::try_parse_from([
            "testbed",
            "link",
            "rails.toml",
            "--prefix",
            "fy7-",
            "r1",
            "1",
            "down",
        ])
        .expect("parses");
        match cli.args.action {
            TestbedAction::Link {
                host,
                rail,
                state,
                prefix,
                ..
            } => {
                assert_eq!((host.as_str(), rail, state), ("r1", 1, LinkState::Down));
                assert_eq!(prefix.as_deref(), Some("fy7-"));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["testbed", "link", "g", "r1", "1", "sideways"]).is_err());
        assert!(Cli::try_parse_from(["testbed", "link", "g", "r1", "-1", "up"]).is_err());
    }

    #[test]
    fn up_takes_ssh_and_ssh_config_takes_a_prefix() {
        let cli = Cli::try_parse_from(["testbed", "up", "g.toml", "--ssh", "--prefix", "fy7-"])
            .expect("parses");
        match cli.args.action {
            TestbedAction::Up { ssh, prefix, .. } => {
                assert!(ssh);
                assert_eq!(prefix.as_deref(), Some("fy7-"));
            }
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["testbed", "up", "g.toml"]).expect("parses");
        assert!(matches!(
            cli.args.action,
            TestbedAction::Up {
                ssh: false,
                slurm: false,
                ..
            }
        ));
        let cli = Cli::try_parse_from(["testbed", "up", "g.toml", "--slurm"]).expect("parses");
        assert!(matches!(
            cli.args.action,
            TestbedAction::Up { slurm: true, .. }
        ));
        let cli =
            Cli::try_parse_from(["testbed", "ssh-config", "--prefix", "fy7-"]).expect("parses");
        assert!(matches!(
            cli.args.action,
            TestbedAction::SshConfig { prefix } if prefix == "fy7-"
        ));
        assert!(Cli::try_parse_from(["testbed", "ssh-config"]).is_err());
    }
}
