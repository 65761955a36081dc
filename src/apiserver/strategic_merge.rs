//! Strategic merge patch for built-in kinds.
