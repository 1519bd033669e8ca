//! `ferry testbed up|run|down|paths`: the command-line face of the testbed.

use crate::{remove, run_prefix, Testbed};
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
    },
    /// Run a command on one host (or front node) of a standing testbed.
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
}

fn load(grid: &std::path::Path) -> Result<Topology, String> {
    Topology::load(grid).map_err(|e| e.to_string())
}

/// Runs `ferry testbed …`; returns the exit status.
pub fn testbed_command(args: TestbedArgs) -> i32 {
    let result: Result<i32, String> = (|| match args.action {
        TestbedAction::Up { grid, prefix } => {
            let topology = load(&grid)?;
            let prefix = prefix.unwrap_or_else(run_prefix);
            let testbed = Testbed::up(&topology, &prefix).map_err(|e| e.to_string())?;
            let plan = testbed.keep();
            println!(
                "testbed {prefix} is up: namespaces {}",
                plan.all_namespaces().join(" ")
            );
            println!(
                "run on a host:  ferry testbed run {} HOST -- CMD",
                grid.display()
            );
            println!("remove it:      ferry testbed down --prefix {prefix}");
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
            let status = std::process::Command::new("ip")
                .args(["netns", "exec", &ns])
                .args(&command)
                .status()
                .map_err(|e| format!("`ip netns exec {ns} …`: {e}"))?;
            Ok(status.code().unwrap_or(128 + 9))
        }
        TestbedAction::Down { grid, prefix } => {
            if let Some(grid) = grid {
                load(&grid)?;
            }
            crate::preflight().map_err(|e| e.to_string())?;
            let removed = remove(prefix.as_deref()).map_err(|e| e.to_string())?;
            println!(
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
        TestbedAction::Paths { grid } => {
            let topology = load(&grid)?;
            print!("{}", path::render_matrix(&topology.rank_guids()));
            Ok(0)
        }
    })();
    result.unwrap_or_else(|e| {
        eprintln!("ferry testbed: {e}");
        1
    })
}
