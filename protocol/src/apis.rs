//! The API keys and versions Floe serves. (in progress)
