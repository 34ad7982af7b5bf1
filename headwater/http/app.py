"""The one FastAPI app of `headwater serve`: /api/v1, /admin, /webhooks, /healthz, /readyz, /metrics.

Two modes, chosen by configuration: with a Chroma server (HEADWATER_CHROMA_HOST, or Chroma Cloud)
it queues runs for the fleet through Redis; with neither it is the one process of a small install,
holding the embedded Chroma's writer lock and running syncs and schedules in-process.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from headwater.settings import Settings

log = logging.getLogger("headwater.serve")
HERE = Path(__file__).parent


@dataclass
class Services:
    settings: Settings
    store: Any
    catalog: Any
    backend: Any
    auth: Any
    stats: Any
    flashes: Any = None  # headwater.http.flash: the dashboard's one-time messages


def is_fleet(settings: Settings) -> bool:
    return settings.is_remote


def open_services(settings: Settings) -> Services:
    """Everything the routes use; raises (ChromaPathBusy, ValueError) before the app listens."""
    from headwater.http.auth import Auth
    from headwater.http.throttle import FailureThrottle
    from headwater.http.sources import SourceCatalog
    from headwater.http.stats import Stats
    from headwater.http.stats_history import DatabaseSampleHistory, RedisSampleHistory
    from headwater.store.source_store import SourceStore

    store = SourceStore.from_settings(settings)
    if is_fleet(settings) and settings.database_url is None:
        log.warning("sources added through the API are kept in SQLite on this machine (%s); for a fleet set "
                    "HEADWATER_DATABASE_URL to PostgreSQL so they survive this host", store.engine.url.database)
    catalog = SourceCatalog(settings, store)
    if is_fleet(settings):
        from headwater.http.fleet_backend import FleetBackend

        backend: Any = FleetBackend(settings, store, catalog)
    else:
        from headwater.http.embedded_backend import EmbeddedBackend

        backend = EmbeddedBackend(settings, store, catalog)
    # Wrong-token counts shared by every serve replica of a fleet (through its Redis).
    auth = Auth(settings, FailureThrottle(backend.fleet.redis if is_fleet(settings) else None))
    keep = 720  # an hour of samples at the default interval
    history = (RedisSampleHistory(backend.fleet.redis, settings.stats_interval_seconds, keep) if is_fleet(settings)
               else DatabaseSampleHistory(store, keep))
    stats = Stats(backend, settings.stats_interval_seconds, keep, history)
    stats.start()
    from headwater.http.flash import CookieFlashes, RedisFlashes

    # Serve replicas of a fleet share their flashes through Redis; a single serve signs them into a cookie.
    flashes = (RedisFlashes(backend.fleet.redis) if is_fleet(settings)
               else CookieFlashes(auth.signer("headwater-flash"), auth.secure))
    return Services(settings, store, catalog, backend, auth, stats, flashes)


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    """The app; its services open in the lifespan (or are given, already open)."""
    from headwater.http import admin, api, source_actions, webhooks_github, webhooks_s3

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        opened = services is None
        app.state.services = services or open_services(settings)
        try:
            yield
        finally:
            if opened:
                app.state.services.stats.close()
                app.state.services.backend.close()

    app = FastAPI(title="Headwater", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  description="Keep data sources in sync with Chroma. Every route except /healthz and /readyz "
                              "needs the admin token as `Authorization: Bearer <token>`.")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Any:
        # FastAPI echoes the offending input by default; a pasted secret must never come back or be logged.
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        if request.url.path.startswith("/admin"):
            return await admin.invalid_request(request, [(str(e["loc"][-1]) if e["loc"] else "", e["msg"])
                                                         for e in errors])
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        if request.url.path.startswith("/admin") and 400 <= exc.status_code < 500:
            return await admin.http_error(request, exc)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.middleware("http")
    async def count_requests(request: Request, call_next):  # noqa: ANN001, ANN202
        response = await call_next(request)
        route = request.scope.get("route")
        svc = getattr(request.app.state, "services", None)
        if svc is not None:
            svc.stats.requests.labels(request.method, getattr(route, "path", "unmatched"), str(response.status_code)).inc()
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    @app.get("/healthz", tags=["health"], summary="The process is up (no authentication)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Dependencies reachable (no authentication)")
    def readyz(request: Request) -> JSONResponse:
        ok, why = request.app.state.services.backend.ready()
        return JSONResponse({"status": "ready" if ok else "not ready", "detail": why,
                             "mode": request.app.state.services.backend.mode}, status_code=200 if ok else 503)

    def _metrics_auth(request: Request) -> None:
        request.app.state.services.auth.require_token(request)

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics (needs the admin token)",
             dependencies=[Depends(_metrics_auth)], response_class=PlainTextResponse)
    def metrics(request: Request) -> PlainTextResponse:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        from headwater.observability import metrics as pipeline  # noqa: F401  (registers the pipeline series)

        # The app's own series (requests, queue depths, sources), then the pipeline's and the process's.
        return PlainTextResponse(generate_latest(request.app.state.services.stats.registry) + generate_latest(REGISTRY),
                                 media_type=CONTENT_TYPE_LATEST)

    def _token_or_session(request: Request) -> None:
        # The schema and its browser view are part of the API: a token, or a dashboard session.
        auth = request.app.state.services.auth
        if auth.session(request) is None:
            auth.require_token(request)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(_token_or_session)])
    def openapi_schema() -> JSONResponse:
        return JSONResponse(openapi_with_security(app))

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(_token_or_session)])
    def swagger() -> Any:
        from fastapi.openapi.docs import get_swagger_ui_html

        # Served from the installed fastapi-offline's Swagger UI 5 (FastAPI writes OpenAPI 3.1, which
        # Swagger UI 4 cannot render), never a CDN: the docs work offline and on private networks,
        # and the page loads nothing from third parties.
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Headwater API",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url="/static/favicon.svg")

    app.include_router(api.router)
    app.include_router(admin.router)
    app.include_router(source_actions.router)
    from headwater.http import knowledge  # consolidated knowledge: decisions with provenance

    app.include_router(knowledge.api_router)
    app.include_router(knowledge.admin_router)
    app.include_router(webhooks_s3.router)
    app.include_router(webhooks_github.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(importlib.resources.files("fastapi_offline") / "static")),
              name="docs-assets")
    return app


DOCS_ASSETS = "/docs-assets"
# Who authenticates how: the admin token on the API and metrics, the S3 webhook's own token on its
# route; GitHub's webhook is signed (HMAC of the body), which OpenAPI cannot describe as a scheme.
SECURITY_SCHEMES = {
    "adminToken": {"type": "http", "scheme": "bearer", "description": "HEADWATER_ADMIN_TOKEN"},
    "s3WebhookToken": {"type": "http", "scheme": "bearer", "description": "HEADWATER_S3_WEBHOOK_TOKEN"},
}


def openapi_with_security(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document with its security schemes, so /docs has an Authorize button."""
    if app.openapi_schema is None:
        schema = app.openapi()
        schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
        for path, operations in schema.get("paths", {}).items():
            scheme = ("s3WebhookToken" if path.startswith("/webhooks/s3") else
                      "adminToken" if path.startswith(("/api/", "/metrics")) else None)
            for operation in operations.values():
                if scheme:
                    operation["security"] = [{scheme: []}]
        app.openapi_schema = schema
    return app.openapi_schema
