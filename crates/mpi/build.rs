//! Compiles `src/ops_long_double.c`: long double reductions need the C compiler's x87 type.
//! Without a working C compiler the crate still builds, and those reductions report an error.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ferry_long_double)");
    // The standard ABI's library name, what binaries built by MPICH 5's mpicc_abi load. The
    // file stays libmpi.so (mpicc, mpi4py); mpicc and install.sh add the libmpi_abi.so.1 name
    // beside it.
    //
    // Exported symbols are not versioned, on purpose. MPICH 5.0.2's libmpi_abi.so.1, the ABI's
    // reference, defines no version nodes; a program linked against a library whose symbols
    // carry one (MPI_Send@@MPI_5.0) requires it, and on MPICH's library ld.so then prints "no
    // version information available" for every process (on an unversioned library without a
    // .gnu.version section it stops on an assertion): binaries would no longer run both ways
    // (tests/abi_swap.rs fails on that message). A version script given here would not work
    // either: rustc passes the linker its own anonymous script listing every export first;
    // rust-lld binds each symbol to that one and ignores a named node given after it (by
    // pattern or by name), and GNU ld refuses the two together ("anonymous version tag cannot
    // be combined with other version tags"). Only a `.symver` directive per symbol plus a
    // named node does it, and with rust-lld alone.
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
