//! How a rank reports connections it refused: through the rate limit shared with the
//! launcher's bootstrap servers ([`ferry_wire::refusals`]).

pub(crate) use ferry_wire::refusals::RefusalLog as StrangerLog;
