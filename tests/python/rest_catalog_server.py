"""A small writable Iceberg REST catalog for the tests: the external catalog
Floe's REST client option talks to, standing in for Polaris, Nessie, Tabular
or Lakekeeper (none of which run offline here).

It is test infrastructure, not the thing under test: every request is decoded
with pyiceberg's own REST models and applied to a pyiceberg `SqlCatalog`
(SQLite), whose `commit_table` checks the commit's requirements (so a stale
commit gets 409 as from a real catalog). Implements what a writer needs:
`/v1/config`, `/v1/oauth/tokens` (client credentials), namespaces (list, exists,
get, create, list tables) and tables (exists, load, create, commit).

With `tls=(cert, key)` it serves https. With `credential="id:secret"` every catalog request must carry the bearer
token handed out for that credential (401 otherwise), so a client that does
not do the OAuth2 exchange fails. `requests` records (method, path, status).

Run standalone: `python rest_catalog_server.py --port 8181 --dir /tmp/cat`.
"""

from __future__ import annotations

import argparse
import json
import secrets
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import CreateTableRequest, TableResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (CommitFailedException, NamespaceAlreadyExistsError, NoSuchNamespaceError,
                                  NoSuchTableError, TableAlreadyExistsError)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest, CommitTableResponse
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER


class RestCatalogServer:
    """A REST catalog on 127.0.0.1:`port` over a SqlCatalog in `directory` (catalog.db + warehouse)."""

    def __init__(self, directory: Path, port: int = 0, warehouse: str | None = None,
                 credential: str | None = None, name: str = "rest", tls: tuple[Path, Path] | None = None,
                 **storage_props: str):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.warehouse = warehouse or f"file://{self.directory / 'warehouse'}"
        self.db_uri = f"sqlite:///{self.directory / 'catalog.db'}"
        self.storage_props = storage_props
        self.catalog = SqlCatalog(name, uri=self.db_uri, warehouse=self.warehouse, **storage_props)
        self.credential = credential
        self.token = secrets.token_hex(16) if credential else None
        self.requests: list[tuple[str, str, int]] = []
        # One request at a time: SQLite and the catalog object are not shared across threads.
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: the test reads `requests`
                pass

            def _handle(self, method: str):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server.lock:
                    status, payload = server.dispatch(method, self.path, self.headers, body)
                    server.requests.append((method, urllib.parse.urlsplit(self.path).path, status))
                data = b"" if payload is None or method == "HEAD" else payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._handle("GET")

            def do_HEAD(self):
                self._handle("HEAD")

            def do_POST(self):
                self._handle("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.scheme = "http"
        if tls is not None:
            # (certificate chain, key) PEM files: serve https with them.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> "RestCatalogServer":
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- requests ------------------------------------------------------------
    @staticmethod
    def _error(code: int, kind: str, message: str) -> tuple[int, str]:
        return code, json.dumps({"error": {"message": message, "type": kind, "code": code}})

    def dispatch(self, method: str, raw_path: str, headers, body: bytes) -> tuple[int, str | None]:
        path = urllib.parse.urlsplit(raw_path).path
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:1] != ["v1"]:
            return self._error(404, "NotFound", f"no route {path}")
        parts = parts[1:]
        if parts == ["oauth", "tokens"] and method == "POST":
            return self.oauth(body)
        if self.token and headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(401, "NotAuthorizedException", "missing or wrong bearer token")
        try:
            return self.route(method, parts, body)
        except (NoSuchNamespaceError, NoSuchTableError) as e:
            return self._error(404, type(e).__name__, str(e))
        except (NamespaceAlreadyExistsError, TableAlreadyExistsError) as e:
            return self._error(409, "AlreadyExistsException", str(e))
        except CommitFailedException as e:
            return self._error(409, "CommitFailedException", str(e))
        except Exception as e:  # noqa: BLE001 - reported to the client, as a real catalog would
            return self._error(500, type(e).__name__, repr(e))

    def oauth(self, body: bytes) -> tuple[int, str]:
        form = urllib.parse.parse_qs(body.decode())
        given = f"{form.get('client_id', [''])[0]}:{form.get('client_secret', [''])[0]}"
        if form.get("grant_type") != ["client_credentials"] or self.credential is None or given != self.credential:
            return self._error(401, "NotAuthorizedException", "bad client credentials")
        return 200, json.dumps({"access_token": self.token, "token_type": "bearer", "expires_in": 3600,
                                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})

    def route(self, method: str, parts: list[str], body: bytes) -> tuple[int, str | None]:
        cat = self.catalog
        if parts == ["config"] and method == "GET":
            return 200, json.dumps({"defaults": {}, "overrides": {}})
        if parts == ["namespaces"] and method == "GET":
            return 200, json.dumps({"namespaces": [list(ns) for ns in cat.list_namespaces()]})
        if parts == ["namespaces"] and method == "POST":
            req = json.loads(body)
            cat.create_namespace(tuple(req["namespace"]), req.get("properties") or {})
            return 200, json.dumps({"namespace": req["namespace"], "properties": req.get("properties") or {}})
        if len(parts) == 2 and parts[0] == "namespaces" and method in ("GET", "HEAD"):
            ns = tuple(parts[1].split("\x1f"))
            props = cat.load_namespace_properties(ns)
            return 200, json.dumps({"namespace": list(ns), "properties": props})
        if len(parts) == 3 and parts[0] == "namespaces" and parts[2] == "tables":
            ns = tuple(parts[1].split("\x1f"))
            if method == "GET":
                idents = [{"namespace": list(Catalog.namespace_from(t)), "name": Catalog.table_name_from(t)}
                          for t in cat.list_tables(ns)]
                return 200, json.dumps({"identifiers": idents})
            if method == "POST":
                # Optional in the REST spec, required (nullable) in pyiceberg's model.
                fields = {"location": None, "partition-spec": None, "write-order": None, **json.loads(body)}
                # A client's unbound spec may leave `field-id` out (the spec allows it; pyiceberg's
                # model does not): number them as a catalog would, from 1000.
                spec = fields["partition-spec"]
                if spec:
                    for i, field in enumerate(spec.get("fields", [])):
                        field.setdefault("field-id", 1000 + i)
                req = CreateTableRequest.model_validate(fields)
                table = cat.create_table(
                    ns + (req.name,), schema=req.table_schema, location=req.location,
                    partition_spec=req.partition_spec or UNPARTITIONED_PARTITION_SPEC,
                    sort_order=req.write_order or UNSORTED_SORT_ORDER, properties=req.properties)
                return 200, self._table_response(table)
        if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "tables":
            ident = tuple(parts[1].split("\x1f")) + (parts[3],)
            if method in ("GET", "HEAD"):
                return 200, self._table_response(cat.load_table(ident))
            if method == "POST":
                req = CommitTableRequest.model_validate_json(body)
                table = cat.load_table(ident)
                resp: CommitTableResponse = cat.commit_table(table, req.requirements, req.updates)
                return 200, resp.model_dump_json(by_alias=True, exclude_none=True)
        return self._error(404, "NotFound", f"no route {method} /v1/{'/'.join(parts)}")

    @staticmethod
    def _table_response(table) -> str:
        resp = TableResponse(**{"metadata-location": table.metadata_location, "metadata": table.metadata, "config": {}})
        return resp.model_dump_json(by_alias=True, exclude_none=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8181)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--credential")
    args = ap.parse_args()
    server = RestCatalogServer(args.dir, port=args.port, credential=args.credential).start()
    print(f"REST catalog at {server.uri}", flush=True)
    server.thread.join()


if __name__ == "__main__":
    main()
