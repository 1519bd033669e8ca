//! Compiles `src/abort.c` (`bsp_abort` is variadic, which stable Rust cannot define) and has
//! the linker export it and `bsp_vabort` from `libbsp.so` beside the Rust functions.

fn main() {
    println!("cargo:rerun-if-changed=src/abort.c");
    println!("cargo:rerun-if-changed=exports.map");
    cc::Build::new()
        .file("src/abort.c")
        .opt_level(2)
        .cargo_metadata(false)
        .compile("ferry_bsp_abort");
    // Whole: nothing in Rust calls these functions, and the library must still hold them.
    println!(
        "cargo:rustc-link-search=native={}",
        std::env::var("OUT_DIR").expect("OUT_DIR")
    );
    println!("cargo:rustc-link-lib=static:+whole-archive=ferry_bsp_abort");
    let map = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("exports.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
