//! Files read whole, with a cap: a hostfile, a selection table or a cost matrix is small, and a
//! path such as `/dev/zero` or a huge file by mistake must end in an error naming the file and
//! the cap instead of taking all memory. The caller opens the file; this reads at most one byte
//! past the cap.

use std::io::Read;
use thiserror::Error;

/// The largest configuration file ferry reads whole (hostfile, grid file, selection table,
/// cost matrix): 16 MiB, far beyond any real one (65 536 hosts of 200 characters a line).
pub const MAX_CONFIG_FILE: u64 = 16 << 20;

/// Why a capped read failed.
#[derive(Debug, Error)]
pub enum BoundedReadError {
    /// More than the cap.
    #[error(
        "larger than {cap} bytes (the most ferry reads of such a file; is it the right file?)"
    )]
    TooLarge {
        /// The cap in bytes.
        cap: u64,
    },
    /// Not UTF-8 text.
    #[error("not UTF-8 text")]
    NotText,
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// All of `reader` as text, if it holds at most `cap` bytes of UTF-8.
pub fn read_text(reader: impl Read, cap: u64) -> Result<String, BoundedReadError> {
    let mut bytes = Vec::new();
    reader.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(BoundedReadError::TooLarge { cap });
    }
    String::from_utf8(bytes).map_err(|_| BoundedReadError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_input_stops_one_byte_past_the_cap() {
        let endless = std::io::repeat(0);
        let e = read_text(endless, 1 << 20).unwrap_err().to_string();
        assert!(e.starts_with("larger than 1048576 bytes"), "{e}");
        assert_eq!(read_text(&b"node1:4\n"[..], 8).unwrap(), "node1:4\n");
        assert!(read_text(&b"node1:4\n"[..], 7).is_err());
        assert!(matches!(
            read_text(&[0xff, 0xfe][..], 8),
            Err(BoundedReadError::NotText)
        ));
    }

    proptest::proptest! {
        /// Any input and cap: the text when it fits and is UTF-8, else the reason; never more
        /// than one byte past the cap is read.
        #[test]
        fn fits_or_says_why(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64), cap in 0u64..80) {
            let mut source = &bytes[..];
            let got = read_text(&mut source, cap);
            let consumed = bytes.len() - source.len();
            proptest::prop_assert!(consumed as u64 <= cap + 1);
            match got {
                Ok(text) => {
                    proptest::prop_assert!(bytes.len() as u64 <= cap);
                    proptest::prop_assert_eq!(text.as_bytes(), &bytes[..]);
                }
                Err(BoundedReadError::TooLarge { cap: c }) => {
                    proptest::prop_assert_eq!(c, cap);
                    proptest::prop_assert!(bytes.len() as u64 > cap);
                }
                Err(BoundedReadError::NotText) => {
                    proptest::prop_assert!(std::str::from_utf8(&bytes).is_err());
                }
                Err(BoundedReadError::Io(e)) => proptest::prop_assert!(false, "{e}"),
            }
        }
    }
}
