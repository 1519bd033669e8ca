//! Loading from a file that does not exist: the error names the file. Alone in its test
//! binary because it sets FERRY_FABRIC_LIB, which every `Library::load` reads.

use ferry_fabric::{FabricError, Library};

#[test]
fn load_reports_missing_library() {
    std::env::set_var(ferry_fabric::LIBRARY_ENV, "/nonexistent");
    let error = Library::load().err().expect("/nonexistent loaded");
    assert!(
        matches!(&error, FabricError::Load { path, .. } if path == "/nonexistent"),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("/nonexistent") && text.contains("FERRY_FABRIC_LIB"),
        "{text}"
    );
    std::env::remove_var(ferry_fabric::LIBRARY_ENV);
}
