//! `ferry info`: the version, the fabric this machine offers, and with `--params` every setting
//! in effect.

use crate::InfoArgs;
use ferry_launch::Launcher;

pub(crate) fn info_command(args: InfoArgs) -> i32 {
    println!("ferry {}", env!("CARGO_PKG_VERSION"));
    if let Ok(config) = ferry_core::Config::from_env() {
        print_fabric(config.net);
    }
    // What --map-by and --bind-to work with on this host.
    println!("topology: {}", ferry_topo::Topology::detect().summary());
    if args.params {
        match ferry_core::Config::from_env() {
            Ok(config) => {
                for (name, value) in config.describe() {
                    println!("{name:<24} {value}");
                }
                // The launcher's settings: how `--launcher ssh` reaches other hosts.
                let ssh = Launcher::Ssh
                    .remote_shell(|name| std::env::var(name).ok())
                    .unwrap_or_default()
                    .join(" ");
                println!("{:<24} {ssh}", ferry_launch::SSH_ENV);
                // And whether a host may run more than RANKS_PER_CORE ranks per core.
                let oversubscribe =
                    std::env::var(ferry_launch::OVERSUBSCRIBE_ENV).unwrap_or_default();
                println!("{:<24} {oversubscribe}", ferry_launch::OVERSUBSCRIBE_ENV);
                match ferry_launch::settings::describe() {
                    Ok(launcher) => {
                        for (name, value) in launcher {
                            println!("{name:<24} {value}");
                        }
                    }
                    Err(e) => {
                        eprintln!("ferry info: {e}");
                        return 1;
                    }
                }
            }
            Err(e) => {
                eprintln!("ferry info: {e}");
                return 1;
            }
        }
    }
    0
}

/// The libfabric this process would load and its providers, each marked with whether
/// `FERRY_NET` (as set now) would carry messages between hosts on it.
fn print_fabric(net: ferry_core::NetKind) {
    let lib = match ferry_fabric::Library::load() {
        Ok(lib) => lib,
        Err(e) => {
            println!("fabric: none ({e}); between hosts: TCP");
            return;
        }
    };
    let (major, minor) = lib.version();
    println!("fabric: libfabric {major}.{minor} ({})", lib.path());
    match lib.providers(&ferry_fabric::EndpointSpec::default()) {
        Ok(list) if list.is_empty() => println!("  no provider offers what ferry needs"),
        Ok(list) => {
            let mut chosen = false;
            for p in list {
                let mark = match net.admits(&p.provider) && !chosen {
                    true => {
                        chosen = true;
                        "between hosts"
                    }
                    false => "",
                };
                println!(
                    "  {:<14} {:<18} {:<10} mr_mode {:<28} {mark}",
                    p.provider, p.fabric, p.domain, p.mr_mode
                );
            }
            if !chosen {
                println!("  none used between hosts with FERRY_NET={net:?} (TCP)");
            }
        }
        Err(e) => println!("  cannot list providers: {e}"),
    }
}
