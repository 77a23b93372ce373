//! `RegistryError`: why a registry request failed, with the error code and HTTP
//! status the Confluent Schema Registry answers for it, so clients that branch on
//! them (`40401` subject not found, `409` incompatible, ...) behave as against
//! Confluent's.

/// A refused or failed registry request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No such subject (or only soft-deleted versions, unless those were asked for).
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    /// No such version of the subject.
    #[error("Version {1} not found.")]
    VersionNotFound(String, i32),
    /// No schema with that id, or the schema is not registered under the subject.
    #[error("Schema not found")]
    SchemaNotFound,
    /// The subject was soft-deleted (a soft delete of it again is refused).
    #[error("Subject '{0}' was soft deleted. Set permanent=true to delete permanently")]
    SubjectSoftDeleted(String),
    /// A permanent delete of a subject that was not soft-deleted first.
    #[error("Subject '{0}' was not deleted first before being permanently deleted")]
    SubjectNotSoftDeleted(String),
    /// The version was soft-deleted (a soft delete of it again is refused).
    #[error(
        "Subject '{0}' Version {1} was soft deleted. Set permanent=true to delete permanently"
    )]
    VersionSoftDeleted(String, i32),
    /// A permanent delete of a version that was not soft-deleted first.
    #[error("Subject '{0}' Version {1} was not deleted first before being permanently deleted")]
    VersionNotSoftDeleted(String, i32),
    /// The subject has no compatibility level of its own.
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    SubjectCompatibilityNotConfigured(String),
    /// The subject has no mode of its own.
    #[error("Subject '{0}' does not have subject-level mode configured")]
    SubjectModeNotConfigured(String),
    /// The new schema breaks the subject's compatibility level: the reasons.
    #[error("Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]", .reasons.join(", "))]
    Incompatible {
        /// The subject.
        subject: String,
        /// What is incompatible, one message per problem.
        reasons: Vec<String>,
    },
    /// The schema does not parse, or names a reference that does not exist.
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    /// A version that is neither a positive number, `-1` nor `latest`.
    #[error("The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"")]
    InvalidVersion(String),
    /// Not one of the compatibility levels.
    #[error("Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")]
    InvalidCompatibilityLevel,
    /// Not one of the modes.
    #[error("Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT")]
    InvalidMode,
    /// The subject (or the registry) is in a mode that forbids the operation.
    #[error("Subject {0} is in read-only mode")]
    OperationNotPermitted(String),
    /// Other schemas reference the one being permanently deleted.
    #[error("One or more references exist to the schema {{subject={0},version={1}}}")]
    ReferenceExists(String, i32),
    /// The `_schemas` topic could not be written or read.
    #[error("Error while storing the schema: {0}")]
    Store(String),
    /// A write could not be forwarded to the registry that leads `_schemas`.
    #[error("Error while forwarding the request to the primary: {0}")]
    Forwarding(String),
    /// No registry leads `_schemas` now (a leader election, the topic being created): retriable.
    #[error("Unknown primary: {0}")]
    UnknownLeader(String),
}

impl RegistryError {
    /// Confluent's `error_code` for the error.
    pub fn error_code(&self) -> i32 {
        match self {
            RegistryError::SubjectNotFound(_) => 40401,
            RegistryError::VersionNotFound(..) => 40402,
            RegistryError::SchemaNotFound => 40403,
            RegistryError::SubjectSoftDeleted(_) => 40404,
            RegistryError::SubjectNotSoftDeleted(_) => 40405,
            RegistryError::VersionSoftDeleted(..) => 40406,
            RegistryError::VersionNotSoftDeleted(..) => 40407,
            RegistryError::SubjectCompatibilityNotConfigured(_) => 40408,
            RegistryError::SubjectModeNotConfigured(_) => 40409,
            RegistryError::Incompatible { .. } => 409,
            RegistryError::InvalidSchema(_) => 42201,
            RegistryError::InvalidVersion(_) => 42202,
            RegistryError::InvalidCompatibilityLevel => 42203,
            RegistryError::InvalidMode => 42204,
            RegistryError::OperationNotPermitted(_) => 42205,
            RegistryError::ReferenceExists(..) => 42206,
            RegistryError::Store(_) => 50001,
            RegistryError::Forwarding(_) => 50003,
            RegistryError::UnknownLeader(_) => 50004,
        }
    }

    /// The HTTP status of the answer: the error code's first three digits.
    pub fn http_status(&self) -> u16 {
        let code = self.error_code();
        let status = if code >= 1000 { code / 100 } else { code };
        u16::try_from(status).unwrap_or(500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_the_codes_first_three_digits() {
        assert_eq!(RegistryError::SubjectNotFound("s".into()).http_status(), 404);
        assert_eq!(
            RegistryError::Incompatible { subject: "s".into(), reasons: vec![] }.http_status(),
            409
        );
        assert_eq!(RegistryError::InvalidSchema("x".into()).http_status(), 422);
        assert_eq!(RegistryError::Store("x".into()).http_status(), 500);
    }
}
