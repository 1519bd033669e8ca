//! Compiles `src/ops_long_double.c`: long double reductions need the C compiler's x87 type.
//! Without a working C compiler the crate still builds, and those reductions report an error.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ferry_long_double)");
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
