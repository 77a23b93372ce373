//! Fetch response writer. (in progress)
