//! Compiles `src/ops_long_double.c`: long double reductions need the C compiler's x87 type.
//! Without a working C compiler the crate still builds, and those reductions report an error.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ferry_long_double)");
    // The standard ABI's library name, what binaries built by MPICH 5's mpicc_abi load. The
    // file stays libmpi.so (mpicc, mpi4py); mpicc and install.sh add the libmpi_abi.so.1 name
    // beside it. (Exported symbols are not versioned: rustc passes the linker an unnamed version
    // script with the export list, and lld keeps that over any named node given after it.)
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
    println!("cargo:rerun-if-changed=src/ops_long_double.c");
    let built = cc::Build::new()
        .file("src/ops_long_double.c")
        .opt_level(2)
        .try_compile("ferry_ops_long_double");
    match built {
        Ok(()) => println!("cargo:rustc-cfg=ferry_long_double"),
        Err(e) => println!("cargo:warning=long double reductions disabled (no C compiler?): {e}"),
    }
}
