//! Forwarding a write to the registry of the broker that leads `_schemas`, as
//! Confluent's followers forward to their primary: the request goes as it came
//! (method, path, body, the client's `Authorization`, so the leader decides who
//! may), marked [`FORWARDED`] so it is never forwarded twice, and the leader's
//! answer comes back verbatim. The leader says, in [`SCHEMAS_OFFSET`], where its
//! `_schemas` ended after the write; the caller waits for its own replica to get
//! there, so a client that registers through one broker reads its schema back
//! from the same broker.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};

/// Header marking a forwarded request.
pub(crate) const FORWARDED: &str = "x-floe-forwarded";
/// Header of a write's answer in a cluster: `_schemas`' high watermark after it.
pub(crate) const SCHEMAS_OFFSET: &str = "x-floe-schemas-offset";

/// How long a forwarded request may take.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The leader's answer.
#[derive(Debug)]
pub(crate) struct Forwarded {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    /// The leader's `_schemas` high watermark after the write, if it said.
    pub(crate) schemas_offset: Option<i64>,
}

/// Sends the request to `leader_url` (`http://HOST:PORT`).
///
/// # Errors
/// Why the leader could not be reached or did not answer.
pub(crate) async fn forward(
    leader_url: &str,
    method: &Method,
    path_and_query: &str,
    body: Bytes,
    authorization: Option<&[u8]>,
) -> Result<Forwarded, String> {
    let Some(authority) = leader_url.strip_prefix("http://") else {
        return Err(format!(
            "the leading registry is at {leader_url}; forwarding is over plain http only"
        ));
    };
    let authority = authority.trim_end_matches('/');
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("connecting to {leader_url}: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("HTTP handshake with {leader_url}: {e}"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = Request::builder()
            .method(method.clone())
            .uri(path_and_query)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::CONTENT_TYPE, floe_schema::rest::CONTENT_TYPE)
            .header(FORWARDED, "1");
        if let Some(a) = authorization {
            request = request.header(hyper::header::AUTHORIZATION, a);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| format!("building the forwarded request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("forwarding to {leader_url}: {e}"))?;
        let status = response.status().as_u16();
        let schemas_offset = response
            .headers()
            .get(SCHEMAS_OFFSET)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading {leader_url}'s answer: {e}"))?
            .to_bytes()
            .to_vec();
        Ok(Forwarded { status, body, schemas_offset })
    };
    tokio::time::timeout(FORWARD_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{leader_url} did not answer within {FORWARD_TIMEOUT:?}"))?
}
