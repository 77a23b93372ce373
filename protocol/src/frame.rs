//! Frames and request headers. (in progress)
