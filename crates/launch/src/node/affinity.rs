//! The binding of one host's ranks as it is applied: by the launcher for the ranks of its own
//! host, and by each node daemon for its host's. The host's topology ([`Topology::detect`]),
//! the policy and the host's number of ranks give the plan ([`binding::plan`]); each rank's
//! cpus are set in its child before exec; `--report-bindings` prints them.

use crate::hosts::binding::{self, BindingError, Plan, Policy};
use ferry_topo::{Source, Topology};
use std::process::Command;

/// The planned binding of one host's ranks.
pub(crate) struct HostAffinity {
    plan: Plan,
    /// How many cpus this host's ranks may use in all (their `FERRY_HOST_CORES`).
    host_cpus: usize,
    /// A made-up topology's cpus are only reported.
    apply: bool,
}

impl HostAffinity {
    /// Plans the binding of `ranks` (universe ranks, ascending) on this host named `host`; with
    /// the policy's report on, prints the topology and each rank's binding on standard error.
    pub(crate) fn plan(
        host: &str,
        ranks: &[u32],
        policy: &Policy,
    ) -> Result<HostAffinity, BindingError> {
        if policy.bind_to == Some(binding::BindTo::None) && !policy.report {
            // Nothing to bind or say: no need to look at the machine.
            return Ok(HostAffinity {
                plan: Plan {
                    cpus: vec![None; ranks.len()],
                    unbound_because: None,
                },
                host_cpus: 0,
                apply: false,
            });
        }
        let topology = Topology::detect();
        let slurm_binds = binding::slurm_binds(|name| std::env::var(name).ok());
        let plan = binding::plan(&topology, ranks.len(), policy, slurm_binds)?;
        let apply = topology.source() != Source::Synthetic;
        if policy.report {
            let mut lines = vec![format!("ferry: host {host}: {}", topology.summary())];
            if !apply {
                lines.push(format!(
                    "ferry: host {host}: the topology is not this machine's: bindings are reported, not applied"
                ));
            }
            for (rank, cpus) in ranks.iter().zip(&plan.cpus) {
                lines.push(binding::report_line(
                    host,
                    *rank,
                    cpus.as_deref(),
                    plan.unbound_because,
                ));
            }
            // One write, so that the lines of two hosts do not interleave.
            eprint!("{}", lines.join("\n") + "\n");
        }
        Ok(HostAffinity {
            plan,
            host_cpus: topology.count(ferry_topo::Level::Pu),
            apply,
        })
    }

    /// Binds the child of the host's `local`-th rank, if it is bound; then tells it how many
    /// cpus the host's ranks share (`FERRY_HOST_CORES`), unless `user_set` (the user's value
    /// stands). Bound to a few cpus, a rank would otherwise count only those, take its peers
    /// for rivals and give its cpu away while it waits.
    pub(crate) fn apply(&self, command: &mut Command, local: usize, user_set: bool) {
        let Some(Some(cpus)) = self.plan.cpus.get(local) else {
            return;
        };
        if !self.apply {
            return;
        }
        crate::sys::bind_to_cpus(command, cpus);
        if !user_set {
            command.env(crate::HOST_CORES_ENV, self.host_cpus.to_string());
        }
    }
}

/// The policy in the variables that `lookup` reads, else `fallback`.
pub(crate) fn policy_from(
    lookup: impl Fn(&str) -> Option<String>,
    fallback: Policy,
) -> Result<Policy, BindingError> {
    Ok(Policy::from_lookup(lookup)?.unwrap_or(fallback))
}
